package raftnode

import (
	"slices"
	"testing"
)

func TestCoalesceCommits(t *testing.T) {
	app := func(name string) outMsg { return outMsg{data: []byte(name), app: true} }
	commit := func(name string) outMsg { return outMsg{data: []byte(name), app: true, commitOnly: true} }
	other := func(name string) outMsg { return outMsg{data: []byte(name)} }
	names := func(ms []outMsg) []string {
		var out []string
		for _, m := range ms {
			out = append(out, string(m.data))
		}
		return out
	}
	cases := []struct {
		name string
		in   []outMsg
		sent []string
		held string // "" when nothing is held
	}{
		{"a later append replaces a commit", []outMsg{commit("c1"), app("a2")}, []string{"a2"}, ""},
		{"every earlier commit goes", []outMsg{commit("c1"), other("hb"), commit("c2"), app("a3")}, []string{"hb", "a3"}, ""},
		{"a trailing commit is held", []outMsg{app("a1"), commit("c2")}, []string{"a1"}, "c2"},
		{"only the newest of trailing commits is held", []outMsg{commit("c1"), commit("c2")}, nil, "c2"},
		{"a message after a commit sends it", []outMsg{commit("c1"), other("vote")}, []string{"c1", "vote"}, ""},
		{"a lone commit is held", []outMsg{commit("c1")}, nil, "c1"},
		{"no appends pass unchanged", []outMsg{other("hb1"), other("hb2")}, []string{"hb1", "hb2"}, ""},
	}
	for _, tc := range cases {
		sent, held, hold := coalesceCommits(slices.Clone(tc.in))
		if got := names(sent); !slices.Equal(got, tc.sent) {
			t.Errorf("%s: sent %v, want %v", tc.name, got, tc.sent)
		}
		if hold != (tc.held != "") || (hold && string(held.data) != tc.held) {
			t.Errorf("%s: held %q (%v), want %q", tc.name, held.data, hold, tc.held)
		}
	}
}
