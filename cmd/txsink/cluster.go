package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/txsink/txsink/api"
	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/config/providers"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/engine"
	"github.com/txsink/txsink/connectors/herder"
)

// serveHerder is what serve needs of a herder: the API's calls and its
// lifecycle.
type serveHerder interface {
	api.Herder
	Start(ctx context.Context) error
	Close()
}

var (
	_ serveHerder = (*herder.Standalone)(nil)
	_ serveHerder = (*herder.Distributed)(nil)
)

// clusterWiring is what distributed mode adds to serve.
type clusterWiring struct {
	herder *herder.Distributed
	// url is the worker's advertised REST URL; allowedHosts its host, which
	// the other workers' forwarded requests name.
	url          string
	allowedHosts []string
	// forward is the client of forwarded requests.
	forward *http.Client
}

// newDistributed builds the distributed herder of a worker advertised as
// id (host:port): that is its id in the cluster, in statuses and in its
// transactional ids, and its URL is the advertised REST URL (https when
// the API is served over TLS, or as rest.advertised.listener says).
func newDistributed(wc config.Worker, id string, tlsCfg *tls.Config, reg *connectors.Registry, resolver *providers.Resolver, engOpt engine.Options) (clusterWiring, error) {
	scheme := "http"
	if tlsCfg != nil {
		scheme = "https"
	}
	if wc.Cluster.AdvertisedListener != "" {
		scheme = wc.Cluster.AdvertisedListener
	}
	engOpt.WorkerID, engOpt.AdvertisedID = id, id
	w := clusterWiring{url: scheme + "://" + id}
	if h, _, err := net.SplitHostPort(id); err == nil && net.ParseIP(h) == nil {
		w.allowedHosts = []string{h}
	}
	var err error
	if w.forward, err = forwardClient(wc, tlsCfg); err != nil {
		return w, err
	}
	w.herder, err = herder.NewDistributed(reg, herder.DistributedOptions{Engine: engOpt, Cluster: wc.Cluster, URL: w.url, Resolver: resolver})
	return w, err
}

// forwardClient is the HTTP client a worker forwards requests with. Over
// TLS it trusts the system's roots and the CA of rest.tls.client.ca.file,
// and presents the worker's own certificate (which the other workers
// verify when they require client certificates).
func forwardClient(wc config.Worker, tlsCfg *tls.Config) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if tlsCfg != nil {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if ca := wc.REST.ClientCA; ca != "" {
			b, err := os.ReadFile(ca)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", config.KeyRESTTLSClientCAFile, err)
			}
			roots.AppendCertsFromPEM(b)
		}
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, Certificates: tlsCfg.Certificates}
	}
	return &http.Client{Transport: tr, Timeout: 90 * time.Second}, nil
}
