package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metricsReadHeaderTimeout bounds a scrape's request headers.
const metricsReadHeaderTimeout = 5 * time.Second

// serveMetrics serves the process's Prometheus registry on addr at
// /metrics until the returned stop is called. It fails at once if addr
// cannot be listened on. With tlsCfg (nil for a plaintext cluster) it
// serves HTTPS.
func serveMetrics(addr string, tlsCfg *tls.Config) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadHeaderTimeout}
	scheme := "http"
	if tlsCfg != nil {
		l, scheme = tls.NewListener(l, tlsCfg), "https"
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server", "addr", addr, "err", err)
		}
	}()
	slog.Info("serving metrics", "url", scheme+"://"+l.Addr().String()+"/metrics")
	return func() {
		srv.Close()
		<-done
	}, nil
}
