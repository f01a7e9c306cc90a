package integration

// The container image: built from deploy/Dockerfile, checked for size and
// user, then run next to the harness's Kafka and PostgreSQL; a connector
// created over REST must deliver exactly once.
//
// Where no image registry is reachable (CI), the Dockerfile's build stage
// cannot pull the official golang image: the test then builds a local
// stand-in with deploy/testimages/build-go-builder.sh from the stand-in base
// image (TXSINK_TEST_BASE_IMAGE, printed by deploy/testimages/build.sh), this
// machine's Go toolchain and its module cache. TXSINK_TEST_GO_IMAGE names a
// builder image to use instead; with neither variable set, the Dockerfile's
// default (the official image) is used and Docker pulls it.
//
// The image is tagged txsink-test/txsink:<hash of the build inputs> and
// reused while they do not change; older tags of it are removed.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txsink/txsink/integration/harness"
)

const (
	// imageMaxBytes is the acceptance bound on the image size.
	imageMaxBytes = 40 << 20
	imageRepo     = "txsink-test/txsink"
	// envGoImage names a ready Go builder image for the Dockerfile.
	envGoImage = "TXSINK_TEST_GO_IMAGE"
	// envBaseImage names the stand-in base image build-go-builder.sh uses.
	envBaseImage = "TXSINK_TEST_BASE_IMAGE"
)

// docker runs the docker CLI and returns its standard output.
func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("docker %s: %v\n%s", strings.Join(args, " "), err, tail(errb.String(), 4000))
	}
	return strings.TrimSpace(out.String()), nil
}

// requireDockerCLI skips (or, with TXSINK_TEST_REQUIRE_SERVICES, fails)
// unless the docker CLI reaches an engine.
func requireDockerCLI(t *testing.T) {
	t.Helper()
	var reason string
	if _, err := exec.LookPath("docker"); err != nil {
		reason = "the docker CLI is not installed"
	} else if _, err := docker(context.Background(), "version", "--format", "{{.Server.Version}}"); err != nil {
		reason = "no Docker engine answers the docker CLI"
	}
	if reason == "" {
		return
	}
	if v, _ := strconv.ParseBool(os.Getenv(harness.EnvRequireServices)); v {
		t.Fatalf("%s, but %s is true", reason, harness.EnvRequireServices)
	}
	t.Skipf("%s: skipping the image test", reason)
}

// repoRoot is the module root (the tests run in ./integration).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// goBuilderImage returns the GO_IMAGE build argument ("" for the
// Dockerfile's default).
func goBuilderImage(t *testing.T, ctx context.Context) string {
	t.Helper()
	if img := os.Getenv(envGoImage); img != "" {
		return img
	}
	if os.Getenv(envBaseImage) == "" {
		t.Logf("neither %s nor %s is set: building with the Dockerfile's default Go image", envGoImage, envBaseImage)
		return ""
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(repoRoot(t), "deploy", "testimages", "build-go-builder.sh"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("build-go-builder.sh: %v\n%s", err, tail(errb.String(), 4000))
	}
	img, ok := strings.CutPrefix(strings.TrimSpace(out.String()), "export "+envGoImage+"=")
	if !ok || img == "" {
		t.Fatalf("build-go-builder.sh printed %q", out.String())
	}
	t.Logf("Go builder image %s (%v)", img, time.Since(start).Round(time.Second))
	return img
}

// buildInputsHash hashes what the image is built from: the files git
// knows (tracked or not ignored) and the builder image's id.
func buildInputsHash(t *testing.T, ctx context.Context, root, goImage string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "" // not a git checkout: no reuse
	}
	h := sha256.New()
	fmt.Fprintf(h, "go image %s\n", goImage)
	if goImage != "" {
		id, _ := docker(ctx, "image", "inspect", "-f", "{{.Id}}", goImage)
		fmt.Fprintf(h, "go image id %s\n", id)
	}
	for _, f := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		if !affectsImage(f) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			continue // deleted but still in the index
		}
		fmt.Fprintf(h, "%s %d\n", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// affectsImage reports whether a file of the build context can change the
// image: tests, documentation and the other deployment files cannot.
func affectsImage(f string) bool {
	if strings.HasSuffix(f, "_test.go") || strings.HasSuffix(f, ".md") {
		return false
	}
	for _, dir := range []string{"docs/", ".ci/", "deploy/kubernetes/", "deploy/systemd/", "deploy/testimages/"} {
		if strings.HasPrefix(f, dir) {
			return false
		}
	}
	return f != "deploy/docker-compose.yml"
}

// buildImage builds (or reuses) the txsink image and returns its tag.
func buildImage(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	root := repoRoot(t)
	goImage := goBuilderImage(t, ctx)
	hash := buildInputsHash(t, ctx, root, goImage)
	reuse := hash != ""
	if !reuse {
		hash = fmt.Sprintf("tmp%d", time.Now().UnixNano())
	}
	tag := imageRepo + ":" + hash
	if !reuse {
		t.Cleanup(func() { _, _ = docker(context.Background(), "rmi", tag) })
	}
	if _, err := docker(ctx, "image", "inspect", tag); err == nil {
		t.Logf("reusing %s (build inputs unchanged)", tag)
		return tag
	}
	args := []string{"build", "-q", "-f", filepath.Join("deploy", "Dockerfile"), "-t", tag,
		"--label", "io.txsink.test=image", "--build-arg", "VERSION=test-" + hash}
	if goImage != "" {
		args = append(args, "--build-arg", "GO_IMAGE="+goImage)
	}
	args = append(args, ".")
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Dir = root
	// The legacy builder uses local images as they are; BuildKit needs
	// buildx, which a distribution's docker package may lack.
	if exec.CommandContext(ctx, "docker", "buildx", "version").Run() != nil {
		cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("docker %s: %v\n%s", strings.Join(args, " "), err, tail(errb.String(), 6000))
	}
	t.Logf("built %s in %v", tag, time.Since(start).Round(time.Second))
	// The legacy builder leaves the build stage behind as a dangling image
	// (GBs); stages made FROM build-go-builder.sh's image carry its label.
	if _, err := docker(ctx, "image", "prune", "-f", "--filter", "label=io.txsink.go-builder"); err != nil {
		t.Logf("pruning build stages: %v", err)
	}
	// Keep only this build of the test image.
	if old, err := docker(ctx, "image", "ls", "--format", "{{.Repository}}:{{.Tag}}", imageRepo); err == nil {
		for _, o := range strings.Fields(old) {
			if o != tag && reuse {
				_, _ = docker(ctx, "rmi", o)
			}
		}
	}
	return tag
}

// imageConfig is the part of "docker image inspect" the test reads.
type imageConfig struct {
	Size   int64 `json:"Size"`
	Config struct {
		User        string                   `json:"User"`
		Entrypoint  []string                 `json:"Entrypoint"`
		Cmd         []string                 `json:"Cmd"`
		Healthcheck *struct{ Test []string } `json:"Healthcheck"`
		Env         []string                 `json:"Env"`
		Labels      map[string]string        `json:"Labels"`
	} `json:"Config"`
}

func TestImage(t *testing.T) {
	requireDockerCLI(t)
	k, dbURL := sinkEnv(t)
	pool := connectPool(t, dbURL)
	tag := buildImage(t)
	ctx := context.Background()

	// Size and user.
	js, err := docker(ctx, "image", "inspect", tag)
	if err != nil {
		t.Fatal(err)
	}
	var cfgs []imageConfig
	if err := json.Unmarshal([]byte(js), &cfgs); err != nil || len(cfgs) != 1 {
		t.Fatalf("image inspect: %v", err)
	}
	ic := cfgs[0]
	t.Logf("image %s: %.1f MB, user %q", tag, float64(ic.Size)/(1<<20), ic.Config.User)
	if ic.Size >= imageMaxBytes {
		t.Errorf("image is %d bytes, want < %d", ic.Size, imageMaxBytes)
	}
	uid, _, _ := strings.Cut(ic.Config.User, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("image user %q: want a numeric non-root uid", ic.Config.User)
	}
	if ic.Config.Healthcheck == nil || len(ic.Config.Healthcheck.Test) < 3 || ic.Config.Healthcheck.Test[1] != "/txsink" {
		t.Errorf("image healthcheck %+v: want [CMD /txsink healthcheck …]", ic.Config.Healthcheck)
	}

	// Run it next to the harness's services. They publish on 127.0.0.1, so
	// the container shares the host's network; the root file system is
	// read-only as in the Kubernetes manifests.
	port := cliFreePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	pgu, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	pgUser := pgu.User.Username()
	pgPassword, _ := pgu.User.Password()
	pgu.User = nil // credentials come from the environment, as with a Kubernetes Secret
	name := fmt.Sprintf("txsink-image-test-%d", time.Now().UnixNano())
	runArgs := []string{"run", "-d", "--name", name, "--network", "host", "--read-only", "--tmpfs", "/tmp",
		"--label", "io.txsink.test=txsink-image",
		"--health-interval", "1s", "--health-start-period", "30s",
		"-e", "TXSINK_BOOTSTRAP_SERVERS=" + k.Bootstrap,
		"-e", "TXSINK_WORKER_ID=image-1",
		// Through the environment, so that the image's HEALTHCHECK finds the port.
		"-e", fmt.Sprintf("TXSINK_LISTEN=127.0.0.1:%d", port),
		"-e", "PGUSER=" + pgUser, "-e", "PGPASSWORD=" + pgPassword,
		// The worker lends them only to the hosts it is told to.
		"-e", "TXSINK_CONNECTION_ENV_CREDENTIALS_HOSTS=" + pgu.Host}
	if id := os.Getenv(harness.EnvRunID); id != "" {
		runArgs = append(runArgs, "--label", "io.txsink.test.run="+id)
	}
	runArgs = append(runArgs, tag, "serve")
	if _, err := docker(ctx, runArgs...); err != nil {
		_, _ = docker(ctx, "rm", "-f", "-v", name)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("TXSINK_TEST_VERBOSE") != "" {
			logs, _ := exec.Command("docker", "logs", "--tail", "80", name).CombinedOutput()
			t.Logf("container logs (tail):\n%s", logs)
		}
		if _, err := docker(context.Background(), "rm", "-f", "-v", name); err != nil {
			t.Logf("removing container %s: %v", name, err)
		}
	})
	running := func() error {
		st, err := docker(ctx, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", name)
		if err != nil {
			return err
		}
		if !strings.HasPrefix(st, "running") {
			return fmt.Errorf("the txsink container is %s", st)
		}
		return nil
	}
	// The image's own HEALTHCHECK (no shell in the image) must turn healthy.
	deadline := time.Now().Add(60 * time.Second)
	for {
		h, _ := docker(ctx, "inspect", "-f", "{{.State.Health.Status}}", name)
		if h == "healthy" {
			break
		}
		if err := running(); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("container not healthy after 60s (health %q)", h)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// Create the connector over REST.
	topic := "image_events"
	const connName = "image-orders"
	createTopic(t, k, topic, 3)
	createEventsTable(t, pool, topic)
	cfg := baseConnector(connName, topic, pgu.String(), "exactly_once")
	body, _ := json.Marshal(map[string]any{"name": connName, "config": cfg})
	resp, err := http.Post(base+"/connectors", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	rb, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("POST /connectors: %s: %s", resp.Status, rb)
	}

	u := &upstream{}
	produce(t, k.Bootstrap, topic, produceOpts{Records: 3000, Partitions: 3, AbortRatio: 0.2, MaxTxn: 100, Seed: 41}, u)
	waitDrained(t, pool, connName, u, 120*time.Second, running)
	rows := readRows(t, pool, topic)
	if problems := exactness(u, rows, nil); len(problems) > 0 {
		t.Fatalf("%d anomalies in %d rows, first: %v", len(problems), len(rows), problems[:min(10, len(problems))])
	}
	var st struct {
		Connector struct{ State, WorkerID string } `json:"connector"`
	}
	resp, err = http.Get(base + "/connectors/" + connName + "/status")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.Connector.State != "RUNNING" {
		t.Errorf("status: %+v (%v), want RUNNING", st, err)
	}

	// docker stop sends SIGTERM: the worker exits cleanly within the bound.
	start := time.Now()
	if _, err := docker(ctx, "stop", "-t", strconv.Itoa(int(shutdownBound/time.Second)), name); err != nil {
		t.Fatal(err)
	}
	code, _ := docker(ctx, "inspect", "-f", "{{.State.ExitCode}}", name)
	// The image logs JSON (TXSINK_LOG_FORMAT=json), one object per line.
	logs, err := exec.Command("docker", "logs", name).CombinedOutput()
	if err != nil {
		t.Errorf("docker logs: %v", err)
	}
	checkJSONLogs(t, string(logs))
	if code != "0" || time.Since(start) >= shutdownBound {
		t.Errorf("docker stop: exit code %s after %v, want 0 within %v", code, time.Since(start), shutdownBound)
	}
	if n := preparedXacts(t, pool); n != 0 {
		t.Errorf("%d prepared transactions left", n)
	}
	t.Logf("exact: %d rows delivered by the container; stopped in %v", len(rows), time.Since(start).Round(time.Millisecond))
}
