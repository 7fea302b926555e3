package main

import (
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
// cannot be listened on.
func serveMetrics(addr string) (stop func(), err error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: metricsReadHeaderTimeout}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Error("metrics server", "addr", addr, "err", err)
		}
	}()
	slog.Info("serving metrics", "url", "http://"+l.Addr().String()+"/metrics")
	return func() {
		srv.Close()
		<-done
	}, nil
}
