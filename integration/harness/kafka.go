package harness

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// KafkaService is a Kafka broker: a single KRaft node (broker and
// controller) whose transaction and offsets topics have replication factor 1,
// so transactions and read_committed consumers work with one broker.
type KafkaService struct {
	// Bootstrap is the broker's address for clients, "127.0.0.1:port".
	Bootstrap string

	tb testing.TB
	k  *kafkaShared
}

type kafkaShared struct {
	bootstrap string
	ctr       *managedContainer // nil for an external broker
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
	k := service(t, "kafka", startKafka)
	return &KafkaService{Bootstrap: k.bootstrap, tb: t, k: k}
}

// External reports whether the broker was not started by the harness (then
// Stop and Start skip the test).
func (s *KafkaService) External() bool { return s.k.ctr == nil }

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
	return waitReady(ctx, s.k.ctr, "Kafka", func(ctx context.Context) error { return kafkaReady(ctx, s.Bootstrap) })
}

// Client returns a franz-go client for the broker with the given extra
// options, closed when the test ends.
func (s *KafkaService) Client(t testing.TB, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.Bootstrap)}, opts...)...)
	if err != nil {
		t.Fatalf("harness: kafka client: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// CreateTopic creates a topic with the given number of partitions
// (replication factor 1), failing the test on error.
func (s *KafkaService) CreateTopic(t testing.TB, topic string, partitions int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm := kadm.NewClient(s.Client(t))
	resp, err := adm.CreateTopic(ctx, partitions, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("harness: creating topic %s: %v", topic, err)
	}
}

func startKafka(tb testing.TB, sharedMode bool) (*kafkaShared, error) {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	image := envOr(EnvKafkaImage, DefaultKafkaImage)
	var lastErr error
	for range 3 { // a picked port can be taken before Docker binds it
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		bootstrap := "127.0.0.1:" + strconv.Itoa(port)
		ctr, err := startContainer(ctx, tb, sharedMode, containerSpec{
			name:  "kafka",
			image: image,
			env: map[string]string{
				"CLUSTER_ID":          "5L6g3nShT-eMCtK--X86sw",
				"KAFKA_NODE_ID":       "1",
				"KAFKA_PROCESS_ROLES": "broker,controller",
				// PLAINTEXT is for clients on the host; BROKER is the broker's
				// own inter-broker listener (transaction markers), reachable
				// inside the container, where 127.0.0.1:<host port> is not.
				"KAFKA_LISTENERS":                                        "PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:9094,CONTROLLER://0.0.0.0:9093",
				"KAFKA_ADVERTISED_LISTENERS":                             "PLAINTEXT://" + bootstrap + ",BROKER://localhost:9094",
				"KAFKA_LISTENER_SECURITY_PROTOCOL_MAP":                   "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
				"KAFKA_CONTROLLER_QUORUM_VOTERS":                         "1@localhost:9093",
				"KAFKA_CONTROLLER_LISTENER_NAMES":                        "CONTROLLER",
				"KAFKA_INTER_BROKER_LISTENER_NAME":                       "BROKER",
				"KAFKA_LOG_DIRS":                                         "/var/lib/kafka/data",
				"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR":         "1",
				"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":                    "1",
				"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":                 "1",
				"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
				"KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR":            "1",
				"KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS":                 "0",
				"KAFKA_NUM_PARTITIONS":                                   "1",
				"KAFKA_HEAP_OPTS":                                        "-Xmx512m -Xms512m",
			},
			ports: map[string]int{"9092/tcp": port},
		})
		if err != nil {
			lastErr = err
			continue
		}
		if err := waitReady(ctx, ctr, "Kafka", func(ctx context.Context) error { return kafkaReady(ctx, bootstrap) }); err != nil {
			return nil, err
		}
		return &kafkaShared{bootstrap: bootstrap, ctr: ctr}, nil
	}
	return nil, lastErr
}

// kafkaReady checks that the broker answers a metadata request listing itself.
func kafkaReady(ctx context.Context, bootstrap string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(bootstrap), kgo.RetryTimeout(time.Second))
	if err != nil {
		return err
	}
	defer cl.Close()
	brokers, err := kadm.NewClient(cl).ListBrokers(ctx)
	if err != nil {
		return err
	}
	if len(brokers) == 0 {
		return fmt.Errorf("metadata lists no broker")
	}
	return nil
}
