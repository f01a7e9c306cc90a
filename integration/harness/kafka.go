package harness

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaService is a Kafka broker: a single KRaft node (broker and
// controller) whose transaction and offsets topics have replication factor 1,
// so transactions and read_committed consumers work with one broker. Besides
// its plaintext listener it offers a SASL_SSL (SCRAM-SHA-512) and a mutual
// TLS listener (Security).
type KafkaService struct {
	// Bootstrap is the broker's address for clients, "127.0.0.1:port".
	Bootstrap string

	tb testing.TB
	k  *kafkaShared
}

type kafkaShared struct {
	bootstrap string
	ctr       *managedContainer // nil for an external broker
	sec       *KafkaSecurity    // nil for an external broker
}

// Kafka returns a broker shared by the test binary (started on first use).
// It skips the test with the reason when no Docker engine answers and
// TXSINK_TEST_KAFKA_BOOTSTRAP is unset.
func Kafka(t testing.TB) *KafkaService {
	t.Helper()
	if addr := os.Getenv(EnvKafkaBootstrap); addr != "" {
		return &KafkaService{Bootstrap: addr, tb: t, k: &kafkaShared{bootstrap: addr}}
	}
	requireDocker(t, EnvKafkaBootstrap)
	k := service(t, "kafka", func(tb testing.TB, sharedMode bool) (*kafkaShared, error) {
		return startKafka(tb, sharedMode, envOr(EnvKafkaImage, DefaultKafkaImage))
	})
	return &KafkaService{Bootstrap: k.bootstrap, tb: t, k: k}
}

// KafkaOwn returns a broker of the test's own (the image Kafka uses),
// terminated when the test ends, for tests that stop and restart it: a
// restart of the broker the test binary shares would hold up every later
// test while it reloads their partitions, and fail them if it took longer
// than the restarting test allows. With TXSINK_TEST_KAFKA_BOOTSTRAP set it
// returns that broker, whose Stop and Start skip the calling test.
func KafkaOwn(t testing.TB) *KafkaService {
	t.Helper()
	if addr := os.Getenv(EnvKafkaBootstrap); addr != "" {
		return &KafkaService{Bootstrap: addr, tb: t, k: &kafkaShared{bootstrap: addr}}
	}
	requireDocker(t, EnvKafkaBootstrap)
	k, err := startKafka(t, false, envOr(EnvKafkaImage, DefaultKafkaImage))
	if err != nil {
		t.Fatalf("harness: starting a broker of the test's own: %v", err)
	}
	return &KafkaService{Bootstrap: k.bootstrap, tb: t, k: k}
}

// KafkaPrevious returns a broker like Kafka's, of the previous Kafka
// release the suite still tests (TXSINK_TEST_KAFKA_PREVIOUS_IMAGE, default
// DefaultKafkaPreviousImage), shared by the test binary. It always runs in
// a container (TXSINK_TEST_KAFKA_BOOTSTRAP does not apply).
func KafkaPrevious(t testing.TB) *KafkaService {
	t.Helper()
	requireDocker(t, "(none: the previous Kafka release runs in a container)")
	k := service(t, "kafka-previous", func(tb testing.TB, sharedMode bool) (*kafkaShared, error) {
		return startKafka(tb, sharedMode, envOr(EnvKafkaPreviousImage, DefaultKafkaPreviousImage))
	})
	return &KafkaService{Bootstrap: k.bootstrap, tb: t, k: k}
}

// External reports whether the broker was not started by the harness (then
// Stop and Start skip the test).
func (s *KafkaService) External() bool { return s.k.ctr == nil }

// Security returns the broker's secured listeners and the credentials that
// pass them. For a broker the harness did not start, it skips the calling
// test.
func (s *KafkaService) Security() *KafkaSecurity {
	if s.k.sec == nil {
		s.tb.Skipf("harness: Kafka at %s is external (%s): its secured listeners are unknown", s.Bootstrap, EnvKafkaBootstrap)
	}
	return s.k.sec
}

// Stop kills the broker process (SIGKILL: no controlled shutdown), keeping
// its data, for fault tests. Clients see connection errors until Start.
// For a broker the harness did not start, it skips the calling test.
func (s *KafkaService) Stop(ctx context.Context) error {
	if s.k.ctr == nil {
		s.tb.Skipf("harness: Kafka at %s is external (%s): cannot stop it", s.Bootstrap, EnvKafkaBootstrap)
		return ErrExternal
	}
	return s.k.ctr.kill(ctx)
}

// Start starts the broker stopped by Stop, with the same data and address,
// and returns once it answers requests. Cancelling ctx abandons the wait; the
// broker may still come up. For a broker the harness did not start, it skips
// the calling test.
func (s *KafkaService) Start(ctx context.Context) error {
	if s.k.ctr == nil {
		s.tb.Skipf("harness: Kafka at %s is external (%s): cannot start it", s.Bootstrap, EnvKafkaBootstrap)
		return ErrExternal
	}
	if err := s.k.ctr.start(ctx); err != nil {
		return err
	}
	return waitReady(ctx, s.k.ctr, "Kafka", func(ctx context.Context) error { return kafkaReady(ctx, s.Bootstrap, 1) })
}

// Client returns a franz-go client for the broker with the given extra
// options, closed when the test ends.
func (s *KafkaService) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	return kafkaClient(t, s.Bootstrap, opts)
}

// CreateTopic creates a topic with the given number of partitions
// (replication factor 1), failing the test on error.
func (s *KafkaService) CreateTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	createTopic(t, s.Client(t), topic, partitions, 1)
}

func kafkaClient(t testing.TB, bootstrap string, opts []kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...)}, opts...)...)
	if err != nil {
		t.Fatalf("harness: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func createTopic(t testing.TB, cl *kgo.Client, topic string, partitions int32, replicas int16) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	resp, err := kadm.NewClient(cl).CreateTopic(ctx, partitions, replicas, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("harness: creating topic %s: %v", topic, err)
	}
}

// kafkaListener is a client listener of a KRaft node.
type kafkaListener struct {
	name     string // listener name: PLAINTEXT, SCRAM, MTLS, PROXIED
	protocol string // PLAINTEXT, SASL_SSL, SSL
	port     int    // in the container
	hostPort int    // published on 127.0.0.1
	// advertise is the address clients are told ("127.0.0.1:hostPort",
	// or a proxy's address).
	advertise string
}

// kafkaNode describes one KRaft node (broker and controller) to start.
type kafkaNode struct {
	id int
	// host is the node's name on the cluster's network ("localhost" for
	// a lone broker: the inter-broker and controller listeners are then
	// only reached from inside its container).
	host string
	// voters is controller.quorum.voters.
	voters    string
	replicas  int // replication factor of the internal topics
	listeners []kafkaListener
	extra     map[string]string
}

// KafkaJVMOptions are the JVM performance options
// (KAFKA_JVM_PERFORMANCE_OPTS) of every broker the harness starts: the
// client compiler only and the serial collector (LightJVM). A test broker
// starts often, lives for minutes and carries a light load, where the
// server compiler's work is most of its CPU: on the CI machine a broker
// with these options used 4.8 CPU-s to start and 2.9 CPU-s for 1,000
// transactions of 50 records, against 7.1 and 6.0 with the image's
// defaults (G1, both compilers), and 1.1 against 1.45 CPU-s a minute
// idle. Empty: the image's defaults, which the benchmark keeps (it
// measures a broker as deployed).
var KafkaJVMOptions = LightJVM

// LightJVM are the JVM options of the harness's short-lived Java services
// (Kafka, ZooKeeper): the client compiler only and the serial collector.
const LightJVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Djava.awt.headless=true"

// env returns the KAFKA_* variables of the node, in the contract of the
// official apache/kafka image (the stand-in honours the same).
func (n kafkaNode) env() map[string]string {
	listeners := []string{"BROKER://0.0.0.0:9094", "CONTROLLER://0.0.0.0:9093"}
	advertised := []string{"BROKER://" + n.host + ":9094"}
	protocols := []string{"BROKER:PLAINTEXT", "CONTROLLER:PLAINTEXT"}
	for _, l := range n.listeners {
		listeners = append(listeners, fmt.Sprintf("%s://0.0.0.0:%d", l.name, l.port))
		advertised = append(advertised, l.name+"://"+l.advertise)
		protocols = append(protocols, l.name+":"+l.protocol)
	}
	minISR := strconv.Itoa(min(n.replicas, 2))
	rf := strconv.Itoa(n.replicas)
	env := map[string]string{
		"CLUSTER_ID":          "5L6g3nShT-eMCtK--X86sw",
		"KAFKA_NODE_ID":       strconv.Itoa(n.id),
		"KAFKA_PROCESS_ROLES": "broker,controller",
		// Client listeners are published on the host; BROKER is the
		// inter-broker listener (replication, transaction markers),
		// reachable inside the container or the cluster's network.
		"KAFKA_LISTENERS":                                        strings.Join(listeners, ","),
		"KAFKA_ADVERTISED_LISTENERS":                             strings.Join(advertised, ","),
		"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                   strings.Join(protocols, ","),
		"KAFKA_CONTROLLER_QUORUM_VOTERS":                         n.voters,
		"KAFKA_CONTROLLER_LISTENER_NAMES":                        "CONTROLLER",
		"KAFKA_INTER_BROKER_LISTENER_NAME":                       "BROKER",
		"KAFKA_LOG_DIRS":                                         "/var/lib/kafka/data",
		"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":         rf,
		"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                    minISR,
		"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                 rf,
		"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": rf,
		"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":            minISR,
		"KAFKA_DEFAULT_REPLICATION_FACTOR":                       rf,
		"KAFKA_MIN_INSYNC_REPLICAS":                              minISR,
		"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                 "0",
		"KAFKA_NUM_PARTITIONS":                                   "1",
		"KAFKA_HEAP_OPTS":                                        "-Xmx512m -Xms512m",
	}
	if KafkaJVMOptions != "" {
		env["KAFKA_JVM_PERFORMANCE_OPTS"] = KafkaJVMOptions
	}
	for k, v := range n.extra {
		env[k] = v
	}
	return env
}

// ports returns the node's published ports.
func (n kafkaNode) ports() map[string]int {
	out := map[string]int{}
	for _, l := range n.listeners {
		out[fmt.Sprintf("%d/tcp", l.port)] = l.hostPort
	}
	return out
}

func startKafka(tb testing.TB, sharedMode bool, image string) (*kafkaShared, error) {
	ctx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	var lastErr error
	for range 3 { // a picked port can be taken before Docker binds it
		sec, files, err := newKafkaSecurity(tb, sharedMode)
		if err != nil {
			return nil, err
		}
		var hp [3]int
		for i := range hp {
			if hp[i], err = freePort(); err != nil {
				return nil, err
			}
		}
		bootstrap := "127.0.0.1:" + strconv.Itoa(hp[0])
		sec.SASLSSL = "127.0.0.1:" + strconv.Itoa(hp[1])
		sec.MTLS = "127.0.0.1:" + strconv.Itoa(hp[2])
		node := kafkaNode{
			id: 1, host: "localhost", voters: "1@localhost:9093", replicas: 1,
			listeners: []kafkaListener{
				{name: "PLAINTEXT", protocol: "PLAINTEXT", port: 9092, hostPort: hp[0], advertise: bootstrap},
				{name: "SCRAM", protocol: "SASL_SSL", port: 9095, hostPort: hp[1], advertise: sec.SASLSSL},
				{name: "MTLS", protocol: "SSL", port: 9096, hostPort: hp[2], advertise: sec.MTLS},
			},
			extra: kafkaSecurityEnv(),
		}
		ctr, err := startContainer(ctx, tb, sharedMode, containerSpec{
			name:  "kafka",
			image: image,
			env:   node.env(),
			ports: node.ports(),
			files: files,
		})
		if err != nil {
			lastErr = err
			continue
		}
		if err := waitReady(ctx, ctr, "Kafka", func(ctx context.Context) error { return kafkaReady(ctx, bootstrap, 1) }); err != nil {
			return nil, err
		}
		if err := sec.addUser(ctx, bootstrap); err != nil {
			return nil, err
		}
		if err := waitReady(ctx, ctr, "Kafka's SASL_SSL listener", func(ctx context.Context) error {
			return kafkaReadyWith(ctx, sec.SASLSSL, 1, sec.SASLOpts())
		}); err != nil {
			return nil, err
		}
		return &kafkaShared{bootstrap: bootstrap, ctr: ctr, sec: sec}, nil
	}
	return nil, lastErr
}

// kafkaReady checks that the broker answers a metadata request listing at
// least brokers brokers.
func kafkaReady(ctx context.Context, bootstrap string, brokers int) error {
	return kafkaReadyWith(ctx, bootstrap, brokers, nil)
}

func kafkaReadyWith(ctx context.Context, bootstrap string, brokers int, opts []kgo.Opt) error {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(strings.Split(bootstrap, ",")...), kgo.RetryTimeout(time.Second)}, opts...)...)
	if err != nil {
		return err
	}
	defer cl.Close()
	got, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		return err
	}
	if len(got) < brokers {
		return fmt.Errorf("metadata lists %d brokers, want %d", len(got), brokers)
	}
	return nil
}

// containerFile is a file copied into a container at start.
func containerFile(content []byte, path string) testcontainers.ContainerFile {
	return testcontainers.ContainerFile{Reader: strings.NewReader(string(content)), ContainerFilePath: path, FileMode: 0o644}
}
