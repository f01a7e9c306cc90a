package harness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go/network"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/txsink/txsink/integration/faultnet"
)

// ClusterBrokers is the size of the harness's Kafka cluster.
const ClusterBrokers = 3

// KafkaClusterService is a three-node KRaft cluster (each node broker and
// controller) on a private Docker network: replication factor 3 and
// min.insync.replicas 2 for every topic, the transaction and offsets
// topics included, so one node can die at any time. Each broker has two
// client listeners published on 127.0.0.1: a direct one (Bootstrap) and
// one advertised behind a faultnet proxy per broker (Proxied), so that
// clients that bootstrap through the proxies talk to every broker through
// them.
type KafkaClusterService struct {
	// Bootstrap lists the brokers' direct addresses, comma-separated.
	Bootstrap string
	// Proxied lists the brokers' proxied addresses, comma-separated.
	Proxied string

	tb testing.TB
	c  *clusterShared
}

type clusterShared struct {
	nodes []*clusterNode
}

type clusterNode struct {
	id      int32
	addr    string // direct, 127.0.0.1:port
	proxy   *faultnet.Proxy
	ctr     *managedContainer
	mu      sync.Mutex
	stopped bool
}

// KafkaCluster returns a three-broker cluster shared by the test binary
// (started on first use). It skips the test with the reason when no Docker
// engine answers (an existing cluster cannot be named: the tests kill its
// brokers).
func KafkaCluster(t testing.TB) *KafkaClusterService {
	t.Helper()
	requireDocker(t, "(none: the cluster tests kill brokers)")
	c := service(t, "kafka-cluster", startKafkaCluster)
	var direct, proxied []string
	for _, n := range c.nodes {
		direct = append(direct, n.addr)
		proxied = append(proxied, n.proxy.Addr())
	}
	return &KafkaClusterService{Bootstrap: strings.Join(direct, ","), Proxied: strings.Join(proxied, ","), tb: t, c: c}
}

func startKafkaCluster(tb testing.TB, sharedMode bool) (*clusterShared, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	nw, err := network.New(ctx, network.WithLabels(labels("kafka-cluster")))
	if err != nil {
		return nil, err
	}
	register(tb, sharedMode, resource{name: "kafka-cluster network", terminate: func(ctx context.Context) error {
		return nw.Remove(ctx)
	}})
	image := envOr(EnvKafkaImage, DefaultKafkaImage)
	var voters []string
	for i := 1; i <= ClusterBrokers; i++ {
		voters = append(voters, fmt.Sprintf("%d@kafka-%d:9093", i, i))
	}
	c := &clusterShared{}
	for i := 1; i <= ClusterBrokers; i++ {
		n := &clusterNode{id: int32(i)}
		// The proxy listens first, on a port fixed for the cluster's
		// life: the broker advertises it.
		var px *faultnet.Proxy
		var upPort int
		for range 3 {
			if upPort, err = freePort(); err != nil {
				return nil, err
			}
			if px, err = faultnet.New(fmt.Sprintf("kafka-%d", i), "127.0.0.1:0", "127.0.0.1:"+strconv.Itoa(upPort), faultnet.Kafka); err == nil {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		n.proxy = px
		register(tb, sharedMode, resource{name: px.Name() + " proxy", terminate: func(context.Context) error { return px.Close() }})
		host := fmt.Sprintf("kafka-%d", i)
		n.ctr, err = startWithFreePort(func(port int) (*managedContainer, error) {
			n.addr = "127.0.0.1:" + strconv.Itoa(port)
			node := kafkaNode{
				id: i, host: host, voters: strings.Join(voters, ","), replicas: ClusterBrokers,
				listeners: []kafkaListener{
					{name: "PLAINTEXT", protocol: "PLAINTEXT", port: 9092, hostPort: port, advertise: n.addr},
					{name: "PROXIED", protocol: "PLAINTEXT", port: 9097, hostPort: upPort, advertise: px.Addr()},
				},
			}
			return startContainer(ctx, tb, sharedMode, containerSpec{
				name:     host,
				image:    image,
				env:      node.env(),
				ports:    node.ports(),
				networks: []string{nw.Name},
				aliases:  map[string][]string{nw.Name: {host}},
			})
		})
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := waitReady(ctx, n.ctr, n.ctr.name, func(ctx context.Context) error {
			return kafkaReady(ctx, n.addr, ClusterBrokers)
		}); err != nil {
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := waitReady(ctx, n.ctr, n.ctr.name+" (proxied)", func(ctx context.Context) error {
			return kafkaReady(ctx, n.proxy.Addr(), ClusterBrokers)
		}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Brokers returns the node ids, 1 to ClusterBrokers.
func (s *KafkaClusterService) Brokers() []int32 {
	out := make([]int32, len(s.c.nodes))
	for i, n := range s.c.nodes {
		out[i] = n.id
	}
	return out
}

// Proxies returns the brokers' proxies, in node id order.
func (s *KafkaClusterService) Proxies() []*faultnet.Proxy {
	out := make([]*faultnet.Proxy, len(s.c.nodes))
	for i, n := range s.c.nodes {
		out[i] = n.proxy
	}
	return out
}

func (s *KafkaClusterService) node(id int32) (*clusterNode, error) {
	for _, n := range s.c.nodes {
		if n.id == id {
			return n, nil
		}
	}
	return nil, fmt.Errorf("harness: no broker %d in the cluster", id)
}

// Client returns a franz-go client for the cluster's direct listeners with
// the given extra options, closed when the test ends.
func (s *KafkaClusterService) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return kafkaClient(t, s.Bootstrap, opts)
}

// CreateTopic creates a topic with replication factor 3 (min ISR 2),
// failing the test on error.
func (s *KafkaClusterService) CreateTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	createTopic(t, s.Client(t), topic, partitions, ClusterBrokers)
}

// Kill sends SIGKILL to broker id (no controlled shutdown); its data stays.
func (s *KafkaClusterService) Kill(ctx context.Context, id int32) error {
	n, err := s.node(id)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopped = true
	return n.ctr.kill(ctx)
}

// Stop stops broker id gracefully (SIGTERM: a controlled shutdown moves its
// leaderships away first), killing it after a minute.
func (s *KafkaClusterService) Stop(ctx context.Context, id int32) error {
	n, err := s.node(id)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.stopped = true
	return n.ctr.stop(ctx, time.Minute)
}

// Start starts broker id again (same data, same addresses) and returns
// once it is back in the cluster and every partition's replicas are in
// sync again.
func (s *KafkaClusterService) Start(ctx context.Context, id int32) error {
	n, err := s.node(id)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.ctr.start(ctx); err != nil {
		return err
	}
	n.stopped = false
	if err := waitReady(ctx, n.ctr, n.ctr.name, func(ctx context.Context) error { return kafkaReady(ctx, n.addr, ClusterBrokers) }); err != nil {
		return err
	}
	return s.WaitInSync(ctx)
}

// WaitInSync returns once every partition of every topic, the internal
// ones included, has all its replicas in sync: killing a broker then
// leaves every partition with at least min.insync.replicas.
func (s *KafkaClusterService) WaitInSync(ctx context.Context) error {
	return waitReady(ctx, nil, "Kafka cluster in sync", func(ctx context.Context) error {
		cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(s.Bootstrap, ",")...), kgo.RetryTimeout(time.Second))
		if err != nil {
			return err
		}
		defer cl.Close()
		md, err := kadm.NewClient(cl).Metadata(ctx)
		if err != nil {
			return err
		}
		if len(md.Brokers) < ClusterBrokers {
			return fmt.Errorf("%d brokers in the metadata", len(md.Brokers))
		}
		for _, td := range md.Topics {
			if td.Err != nil {
				return fmt.Errorf("topic %s: %w", td.Topic, td.Err)
			}
			for _, p := range td.Partitions {
				if len(p.ISR) < len(p.Replicas) || p.Leader < 0 {
					return fmt.Errorf("%s[%d]: leader %d, ISR %v of replicas %v", td.Topic, p.Partition, p.Leader, p.ISR, p.Replicas)
				}
			}
		}
		return nil
	})
}

// Restart kills broker id, waits pause, and starts it again (Start).
func (s *KafkaClusterService) Restart(ctx context.Context, id int32, pause time.Duration) error {
	if err := s.Kill(ctx, id); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(pause):
	}
	return s.Start(ctx, id)
}

// RollingRestart stops and starts each broker in turn, gracefully, waiting
// until the cluster is in sync before the next.
func (s *KafkaClusterService) RollingRestart(ctx context.Context) error {
	for _, id := range s.Brokers() {
		if err := s.Stop(ctx, id); err != nil {
			return err
		}
		if err := s.Start(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// admin runs fn with an admin client on the brokers that are up.
func (s *KafkaClusterService) admin(ctx context.Context, fn func(*kadm.Client) error) error {
	return s.withClient(func(cl *kgo.Client) error { return fn(kadm.NewClient(cl)) })
}

// withClient runs fn with a client of the brokers that are up.
func (s *KafkaClusterService) withClient(fn func(*kgo.Client) error) error {
	var seeds []string
	for _, n := range s.c.nodes {
		n.mu.Lock()
		if !n.stopped {
			seeds = append(seeds, n.addr)
		}
		n.mu.Unlock()
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RetryTimeout(10*time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	return fn(cl)
}

// Leader returns the broker leading topic's partition.
func (s *KafkaClusterService) Leader(ctx context.Context, topic string, partition int32) (int32, error) {
	var leader int32 = -1
	err := s.admin(ctx, func(adm *kadm.Client) error {
		md, err := adm.Metadata(ctx, topic)
		if err != nil {
			return err
		}
		td, ok := md.Topics[topic]
		if !ok || td.Err != nil {
			return fmt.Errorf("harness: topic %s: %v", topic, td.Err)
		}
		p, ok := td.Partitions[partition]
		if !ok {
			return fmt.Errorf("harness: %s has no partition %d", topic, partition)
		}
		leader = p.Leader
		return nil
	})
	return leader, err
}

// GroupCoordinator returns the broker coordinating group: the leader of
// its __consumer_offsets partition.
func (s *KafkaClusterService) GroupCoordinator(ctx context.Context, group string) (int32, error) {
	return s.coordinator(ctx, group, func(adm *kadm.Client) kadm.FindCoordinatorResponses {
		return adm.FindGroupCoordinators(ctx, group)
	})
}

// TxnCoordinator returns the broker coordinating transactional id txnID:
// the leader of its __transaction_state partition.
func (s *KafkaClusterService) TxnCoordinator(ctx context.Context, txnID string) (int32, error) {
	return s.coordinator(ctx, txnID, func(adm *kadm.Client) kadm.FindCoordinatorResponses {
		return adm.FindTxnCoordinators(ctx, txnID)
	})
}

// coordinator returns the node of key in find's answer.
func (s *KafkaClusterService) coordinator(ctx context.Context, key string, find func(*kadm.Client) kadm.FindCoordinatorResponses) (int32, error) {
	var id int32 = -1
	err := s.admin(ctx, func(adm *kadm.Client) error {
		c, ok := find(adm)[key]
		if !ok {
			return fmt.Errorf("harness: no coordinator for %s", key)
		}
		if c.Err != nil {
			return c.Err
		}
		id = c.NodeID
		return nil
	})
	return id, err
}

// Controller returns the active KRaft controller: the leader of the
// metadata quorum (DescribeQuorum).
func (s *KafkaClusterService) Controller(ctx context.Context) (int32, error) {
	var id int32 = -1
	err := s.withClient(func(cl *kgo.Client) error {
		return waitReady(ctx, nil, "metadata quorum leader", func(ctx context.Context) error {
			req := kmsg.NewPtrDescribeQuorumRequest()
			t := kmsg.NewDescribeQuorumRequestTopic()
			t.Topic = "__cluster_metadata"
			p := kmsg.NewDescribeQuorumRequestTopicPartition()
			p.Partition = 0
			t.Partitions = append(t.Partitions, p)
			req.Topics = append(req.Topics, t)
			resp, err := req.RequestWith(ctx, cl)
			if err != nil {
				return err
			}
			for _, t := range resp.Topics {
				for _, p := range t.Partitions {
					if p.LeaderID >= 0 && slices.Contains(s.Brokers(), p.LeaderID) {
						id = p.LeaderID
						return nil
					}
				}
			}
			return errors.New("no quorum leader in the DescribeQuorum response")
		})
	})
	return id, err
}
