package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// cmdHealthcheck asks a worker's /health endpoint whether it is healthy and
// exits 0 when it answers 200, 1 otherwise. It exists so that a container
// image without a shell (FROM scratch) can still have a HEALTHCHECK:
//
//	HEALTHCHECK CMD ["/txsink", "healthcheck"]
func cmdHealthcheck(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := fs.String("url", envOr("TXSINK_HEALTHCHECK_URL", defaultHealthURL()), "health endpoint to ask (env TXSINK_HEALTHCHECK_URL; default: /health on the port of TXSINK_LISTEN, else 8083, on the loopback interface)")
	timeout := fs.Duration("timeout", 3*time.Second, "give up after this long")
	quiet := fs.Bool("q", false, "print nothing; only the exit code tells")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "txsink healthcheck: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		fmt.Fprintln(stderr, "txsink healthcheck:", err)
		return exitUsage
	}
	client := &http.Client{}
	if strings.HasPrefix(*url, "https://127.0.0.1:") && *url == defaultHealthURL() {
		// The worker's own certificate names its public host, not the
		// loopback address this probe uses; the probe never leaves the
		// machine, so it does not verify it.
		client.Transport = &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}
	}
	resp, err := client.Do(req)
	if err != nil {
		if !*quiet {
			fmt.Fprintln(stderr, "txsink healthcheck:", err)
		}
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if !*quiet {
		fmt.Fprintf(stdout, "%s %s\n", resp.Status, strings.TrimSpace(string(body)))
	}
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}

// defaultHealthURL is /health on the loopback interface, at the port of the
// worker's listen setting (TXSINK_LISTEN) when the environment has it, so
// that a container configured through the environment needs no -url; https
// when the worker serves TLS (TXSINK_REST_TLS_CERT_FILE).
func defaultHealthURL() string {
	port := "8083"
	if l := os.Getenv("TXSINK_LISTEN"); l != "" {
		if _, p, err := net.SplitHostPort(l); err == nil && p != "" {
			port = p
		}
	}
	scheme := "http"
	if os.Getenv("TXSINK_REST_TLS_CERT_FILE") != "" {
		scheme = "https"
	}
	return scheme + "://127.0.0.1:" + port + "/health"
}
