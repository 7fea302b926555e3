package raftnode

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	valid := func() Config {
		return Config{
			ID:    2,
			Peers: map[uint64]string{1: "127.0.0.1:7001", 2: "127.0.0.1:7002", 3: "127.0.0.1:7003"},
			Dir:   "/tmp/x",
		}
	}
	if err := valid().Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	cases := []struct {
		name   string
		mutate func(*Config)
		want   string
	}{
		{"zero id", func(c *Config) { c.ID = 0 }, "ID must be non-zero"},
		{"id not a peer", func(c *Config) { c.ID = 9 }, "ID 9 is not in Peers"},
		{"no peers", func(c *Config) { c.Peers = nil }, "Peers is empty"},
		{"even peers", func(c *Config) { c.Peers[4] = "127.0.0.1:7004" }, "2f+1"},
		{"peer id zero", func(c *Config) { c.Peers[0] = "127.0.0.1:7000"; c.Peers[4] = "127.0.0.1:7004" }, "peer id 0"},
		{"empty address", func(c *Config) { c.Peers[3] = "" }, "peer 3 has an empty address"},
		{"shared address", func(c *Config) { c.Peers[3] = c.Peers[1] }, "peers 1 and 3 share address"},
		{"empty dir", func(c *Config) { c.Dir = "" }, "Dir is empty"},
		{"negative tick", func(c *Config) { c.TickInterval = -time.Millisecond }, "TickInterval"},
		{"election not above heartbeat", func(c *Config) { c.ElectionTicks, c.HeartbeatTicks = 3, 3 }, "ElectionTicks 3 must exceed HeartbeatTicks 3"},
		{"negative heartbeat", func(c *Config) { c.HeartbeatTicks = -1 }, "HeartbeatTicks -1 is negative"},
		{"negative inflight", func(c *Config) { c.MaxInflightMsgs = -1 }, "MaxInflightMsgs -1 is negative"},
		{"inflight above queue", func(c *Config) { c.MaxInflightMsgs = peerQueueMsgsMax + 1 }, "exceeds the peer queue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid()
			tc.mutate(&cfg)
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tc.want)
			}
			if _, nerr := New(cfg, &listFSM{events: &notifier{}}); nerr == nil {
				t.Fatalf("New accepted a config Validate rejects")
			}
		})
	}

	t.Run("reports every problem", func(t *testing.T) {
		err := Config{}.Validate()
		for _, want := range []string{"ID must be non-zero", "Peers is empty", "Dir is empty"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("Validate() = %v, want it to mention %q", err, want)
			}
		}
	})
}
