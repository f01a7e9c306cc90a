package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/config/providers"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/clickhouse"
	"github.com/txsink/txsink/connectors/postgres"
	"github.com/txsink/txsink/connectors/secrets"
	"github.com/txsink/txsink/integration/harness"
)

// decodeStrict decodes YAML into v as the Kubernetes API server's strict
// field validation does: YAML is converted to JSON (duplicate keys are an
// error), then decoded with unknown fields rejected and field names matched
// case-sensitively.
func decodeStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

// splitDocs splits a multi-document YAML file.
func splitDocs(b []byte) [][]byte {
	var out [][]byte
	for _, d := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			out = append(out, []byte(d))
		}
	}
	return out
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// k8sKinds are the kinds the manifests may hold, by apiVersion and kind.
var k8sKinds = map[string]func() any{
	"apps/v1 StatefulSet":           func() any { return &appsv1.StatefulSet{} },
	"batch/v1 Job":                  func() any { return &batchv1.Job{} },
	"v1 Service":                    func() any { return &corev1.Service{} },
	"v1 ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1 Secret":                     func() any { return &corev1.Secret{} },
	"policy/v1 PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	"kustomize.config.k8s.io/v1beta1 Kustomization": func() any { return &kustomization{} },
}

// kustomization is the part of kustomize's Kustomization the directory uses
// (kustomize's types are not in k8s.io/api).
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

type manifest struct {
	file string
	obj  any
}

// decodeManifest decodes one document into the k8s.io/api type its
// apiVersion and kind name.
func decodeManifest(doc []byte) (any, error) {
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, err
	}
	mk, ok := k8sKinds[tm.APIVersion+" "+tm.Kind]
	if !ok {
		return nil, fmt.Errorf("unexpected apiVersion/kind %q %q", tm.APIVersion, tm.Kind)
	}
	obj := mk()
	if err := decodeStrict(doc, obj); err != nil {
		return nil, err
	}
	return obj, nil
}

func loadManifests(t *testing.T) []manifest {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("kubernetes", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests under deploy/kubernetes (%v)", err)
	}
	var out []manifest
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocs(b) {
			obj, err := decodeManifest(doc)
			if err != nil {
				t.Errorf("%s (document %d): %v", f, i+1, err)
				continue
			}
			out = append(out, manifest{file: f, obj: obj})
		}
	}
	return out
}

func only[T any](t *testing.T, ms []manifest) T {
	t.Helper()
	found := all[T](ms)
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T, found %d", zero, len(found))
	}
	return found[0]
}

func all[T any](ms []manifest) []T {
	var found []T
	for _, m := range ms {
		if v, ok := m.obj.(T); ok {
			found = append(found, v)
		}
	}
	return found
}

// TestKubernetesStrictDecodingRejectsUnknownFields shows that the decoding
// the manifests pass would catch a misspelt field.
func TestKubernetesStrictDecodingRejectsUnknownFields(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n",
		"apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: 1, targetport: http}]\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, name: y}\n",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
		"apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: x}\nspec:\n  maxUnavailable: 1\n  maxUnavailable: 2\n",
	} {
		if _, err := decodeManifest([]byte(doc)); err == nil {
			t.Errorf("decoded without error:\n%s", doc)
		}
	}
}

func TestKubernetesManifests(t *testing.T) {
	ms := loadManifests(t)
	if t.Failed() {
		t.FailNow()
	}
	sts := only[*appsv1.StatefulSet](t, ms)
	job := only[*batchv1.Job](t, ms)
	cm := only[*corev1.ConfigMap](t, ms)
	pdb := only[*policyv1.PodDisruptionBudget](t, ms)
	kus := only[*kustomization](t, ms)
	var svc, headless *corev1.Service
	for _, s := range all[*corev1.Service](ms) {
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s
		} else {
			svc = s
		}
	}
	if svc == nil || headless == nil {
		t.Fatal("want a Service for clients and a headless Service for the workers' names")
	}

	t.Run("kustomization lists every manifest", func(t *testing.T) {
		var want []string
		for _, m := range ms {
			if _, ok := m.obj.(*kustomization); !ok {
				want = append(want, filepath.Base(m.file))
			}
		}
		got := slices.Clone(kus.Resources)
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, slices.Compact(want)) {
			t.Errorf("kustomization resources %v, manifests %v", got, want)
		}
	})

	pod := sts.Spec.Template
	t.Run("selectors", func(t *testing.T) {
		podLabels := labels.Set(pod.Labels)
		sel := labels.SelectorFromSet(sts.Spec.Selector.MatchLabels)
		if !sel.Matches(podLabels) {
			t.Errorf("statefulset selector %v does not match its pod labels %v", sel, podLabels)
		}
		for _, s := range []*corev1.Service{svc, headless} {
			if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) {
				t.Errorf("service %s selector %v does not match the pods", s.Name, s.Spec.Selector)
			}
		}
		if sts.Spec.ServiceName != headless.Name {
			t.Errorf("statefulset serviceName %q, want the headless service %s (the workers' advertised names)", sts.Spec.ServiceName, headless.Name)
		}
		if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
			t.Errorf("want 3 replicas, got %v", sts.Spec.Replicas)
		}
		if pdb.Spec.Selector == nil || !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(podLabels) {
			t.Errorf("PodDisruptionBudget selector does not match the pods")
		}
		if pdb.Spec.MinAvailable == nil && pdb.Spec.MaxUnavailable == nil {
			t.Error("PodDisruptionBudget sets neither minAvailable nor maxUnavailable")
		}
	})

	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]

	t.Run("probes on /health", func(t *testing.T) {
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
			if p == nil || p.HTTPGet == nil {
				t.Errorf("%s probe: want an HTTP GET probe", name)
				continue
			}
			if p.HTTPGet.Path != "/health" {
				t.Errorf("%s probe path %q, want /health", name, p.HTTPGet.Path)
			}
			port := p.HTTPGet.Port.IntVal
			if p.HTTPGet.Port.StrVal != "" {
				port = ports[p.HTTPGet.Port.StrVal]
			}
			if port != 8083 {
				t.Errorf("%s probe port %v is not the REST port 8083", name, p.HTTPGet.Port.String())
			}
		}
		if tp := svc.Spec.Ports[0].TargetPort; ports[tp.StrVal] != 8083 && tp.IntVal != 8083 {
			t.Errorf("service targetPort %v is not the REST port", tp.String())
		}
	})

	t.Run("non-root, read-only, no privileges", func(t *testing.T) {
		psc, csc := pod.Spec.SecurityContext, c.SecurityContext
		if psc == nil || csc == nil {
			t.Fatal("pod and container need a securityContext")
		}
		if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("pod must run as non-root with a non-zero runAsUser")
		}
		if csc.RunAsNonRoot != nil && !*csc.RunAsNonRoot || csc.RunAsUser != nil && *csc.RunAsUser == 0 {
			t.Errorf("container overrides the pod's non-root user")
		}
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			t.Error("readOnlyRootFilesystem must be true")
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			t.Error("allowPrivilegeEscalation must be false")
		}
		if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") {
			t.Error("capabilities must drop ALL")
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Error("cpu and memory requests and a memory limit are required")
		}
		// The memory budget follows the limit (README, Memory); a
		// GOMEMLIMIT beside it would override the budget's soft limit.
		budget := false
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				t.Error("GOMEMLIMIT overrides the memory budget's soft limit: set " + config.EnvKey(config.KeyMemoryBudget) + " instead")
			}
			if e.Name == config.EnvKey(config.KeyMemoryBudget) {
				budget = e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil && e.ValueFrom.ResourceFieldRef.Resource == "limits.memory"
			}
		}
		if !budget {
			t.Errorf("%s must come from the container's limits.memory", config.EnvKey(config.KeyMemoryBudget))
		}
	})

	t.Run("volumes, config and secrets resolve", func(t *testing.T) {
		vols := map[string]corev1.Volume{}
		for _, v := range pod.Spec.Volumes {
			vols[v.Name] = v
		}
		mounts := map[string]string{} // mount path -> volume
		for _, m := range c.VolumeMounts {
			if _, ok := vols[m.Name]; !ok {
				t.Errorf("volumeMount %s names no volume", m.Name)
			}
			mounts[m.MountPath] = m.Name
		}
		if v, ok := vols[mounts["/tmp"]]; !ok || v.EmptyDir == nil {
			t.Error("/tmp must be a writable volume (the root file system is read-only)")
		}
		secretDir := ""
		for p, v := range mounts {
			if s := vols[v].Secret; s != nil {
				secretDir = p
				if s.SecretName != "txsink-credentials" || s.Optional != nil && *s.Optional {
					t.Errorf("volume %s mounts secret %s: want the required Secret txsink-credentials", v, s.SecretName)
				}
			}
		}
		if secretDir == "" {
			t.Error("the Secret is not mounted: connectors reference its files")
		}
		for _, v := range pod.Spec.Volumes {
			if v.ConfigMap != nil && v.ConfigMap.Name != cm.Name {
				t.Errorf("volume %s names ConfigMap %s, the manifest is %s", v.Name, v.ConfigMap.Name, cm.Name)
			}
		}
		// Credentials are never shipped (not even placeholders): the
		// operator creates the Secret, and a pod does not start without it.
		for _, m := range ms {
			if sec, ok := m.obj.(*corev1.Secret); ok {
				t.Errorf("%s ships Secret %s: credentials must come from the operator's secret store", m.file, sec.Name)
			}
		}
		for _, e := range append(c.Env, job.Spec.Template.Spec.Containers[0].Env...) {
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
				if r.SecretKeyRef.Name != "txsink-credentials" || r.SecretKeyRef.Optional != nil && *r.SecretKeyRef.Optional {
					t.Errorf("env %s refers to secret %s (optional %v): want the required Secret txsink-credentials that kustomization.yaml tells to create", e.Name, r.SecretKeyRef.Name, r.SecretKeyRef.Optional)
				}
			}
		}
		// Files named in the arguments of the workers and of the Job must
		// be ConfigMap keys under its mount.
		for _, ps := range []corev1.PodSpec{pod.Spec, job.Spec.Template.Spec} {
			cmPath := ""
			for _, m := range ps.Containers[0].VolumeMounts {
				for _, v := range ps.Volumes {
					if v.Name == m.Name && v.ConfigMap != nil {
						cmPath = m.MountPath
						if v.ConfigMap.Name != cm.Name {
							t.Errorf("volume %s names ConfigMap %s, the manifest is %s", v.Name, v.ConfigMap.Name, cm.Name)
						}
					}
				}
			}
			args := ps.Containers[0].Args
			for i := 0; i+1 < len(args); i++ {
				if args[i] != "-config" && args[i] != "-connector" && args[i] != "-f" {
					continue
				}
				key, ok := strings.CutPrefix(args[i+1], cmPath+"/")
				if !ok || cm.Data[key] == "" {
					t.Errorf("%s %s is not a key of ConfigMap %s mounted at %s", args[i], args[i+1], cm.Name, cmPath)
				}
			}
		}
		if !slices.Contains(job.Spec.Template.Spec.Containers[0].Args, "http://"+svc.Name+":8083") {
			t.Errorf("the Job does not call the API through the Service %s: %v", svc.Name, job.Spec.Template.Spec.Containers[0].Args)
		}
	})

	t.Run("advertised address is the pod's name in the headless service", func(t *testing.T) {
		want := "$(POD_NAME)." + headless.Name + ".$(POD_NAMESPACE).svc"
		found := false
		for _, e := range c.Env {
			if e.Name == config.EnvKey(config.KeyRESTAdvertisedHost) {
				found = e.Value == want
			}
		}
		if !found {
			t.Errorf("%s must be %s", config.EnvKey(config.KeyRESTAdvertisedHost), want)
		}
	})

	t.Run("metrics scraping sends the token", func(t *testing.T) {
		token := false
		for _, e := range c.Env {
			token = token || e.Name == config.EnvKey(config.KeyRESTBearerToken)
		}
		if token && pod.Annotations["prometheus.io/scrape"] == "true" {
			t.Error("the pods ask for annotation-based scraping, which sends no bearer token, but /metrics requires one")
		}
	})

	t.Run("configuration is valid", func(t *testing.T) {
		var policy connectors.Policy
		var w config.Worker
		for key, val := range cm.Data {
			if !strings.HasSuffix(key, ".properties") {
				continue
			}
			raw, err := config.ParseWorkerFile([]byte(val))
			if err != nil {
				t.Fatalf("%s: %v", key, err)
			}
			if w, err = config.ParseWorker(raw); err != nil {
				t.Errorf("%s: %v", key, err)
			}
			if !w.Cluster.Enabled {
				t.Errorf("%s: the workers must form a cluster (group.id)", key)
			}
			policy = connectors.Policy{UnixSockets: w.Connections.UnixSockets, EnvCredentialHosts: w.Connections.EnvCredentialHosts}
		}
		secretDir := ""
		for _, m := range c.VolumeMounts {
			for _, v := range pod.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil {
					secretDir = m.MountPath
				}
			}
		}
		for key, val := range cm.Data {
			switch {
			case strings.HasSuffix(key, ".properties"):
			case strings.HasSuffix(key, ".json"):
				raw := validateConnector(t, key, []byte(val), policy)
				clusterSecrets(t, key, raw, w, secretDir)
			default:
				t.Errorf("ConfigMap key %s: neither a worker file nor a connector", key)
			}
		}
	})
}

// clusterSecrets checks that a connector of the cluster holds no secret in
// clear (the cluster would refuse it) and that each reference names a
// configured provider and a file of the mounted Secret that
// kustomization.yaml tells to create.
func clusterSecrets(t *testing.T, what string, raw map[string]string, w config.Worker, secretDir string) {
	t.Helper()
	reg := &connectors.Registry{}
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	if c := secrets.InClear(reg, raw); len(c) > 0 {
		t.Errorf("%s: secrets in clear in %v; the cluster refuses them", what, c)
	}
	kus, _ := os.ReadFile(filepath.Join("kubernetes", "kustomization.yaml"))
	res, err := providers.New(w.Providers)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for k, v := range raw {
		for _, ref := range providers.Refs(v) {
			n++
			if !res.Knows(ref.Text) {
				t.Errorf("%s: %s: %s names no configured provider", what, k, ref.Text)
			}
			if ref.Path != secretDir || !strings.Contains(string(kus), "--from-literal="+ref.Key+"=") {
				t.Errorf("%s: %s: %s is not a file of the Secret mounted at %s that kustomization.yaml creates", what, k, ref.Text, secretDir)
			}
		}
	}
	if n == 0 {
		t.Errorf("%s: no config provider reference: where are its credentials?", what)
	}
}

// validateConnector checks a connector file (Connect's create body) with
// the sink registry, as a worker with policy would.
func validateConnector(t *testing.T, what string, b []byte, policy connectors.Policy) map[string]string {
	t.Helper()
	var body struct {
		Name   string            `json:"name"`
		Config map[string]string `json:"config"`
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&body); err != nil {
		t.Errorf("%s: %v", what, err)
		return nil
	}
	raw := body.Config
	if raw["name"] == "" {
		raw["name"] = body.Name
	}
	reg := &connectors.Registry{}
	for _, spec := range []connectors.Spec{postgres.Spec(), clickhouse.Spec()} {
		if err := reg.Register(spec); err != nil {
			t.Fatal(err)
		}
	}
	reg.SetPolicy(policy)
	if _, _, errs := reg.Validate(raw); errs != nil {
		t.Errorf("%s: %v", what, errs)
	}
	return raw
}

// Compose: the subset of the compose specification the file uses. Decoding
// is strict, so a key outside this subset (or misspelt) fails the test.
type composeFile struct {
	Services map[string]composeService `json:"services"`
	Volumes  map[string]*struct{}      `json:"volumes"`
}

type composeService struct {
	Image       string                       `json:"image"`
	Profiles    []string                     `json:"profiles"`
	Build       *composeBuild                `json:"build"`
	Command     []string                     `json:"command"`
	Environment map[string]string            `json:"environment"`
	Ports       []string                     `json:"ports"`
	Volumes     []string                     `json:"volumes"`
	DependsOn   map[string]composeDependency `json:"depends_on"`
	Healthcheck *composeHealthcheck          `json:"healthcheck"`
	Restart     string                       `json:"restart"`
}

type composeBuild struct {
	Context    string            `json:"context"`
	Dockerfile string            `json:"dockerfile"`
	Args       map[string]string `json:"args"`
}

type composeDependency struct {
	Condition string `json:"condition"`
}

type composeHealthcheck struct {
	Test        []string `json:"test"`
	Interval    string   `json:"interval"`
	Timeout     string   `json:"timeout"`
	Retries     int      `json:"retries"`
	StartPeriod string   `json:"start_period"`
}

func TestComposeStrictDecodingRejectsUnknownFields(t *testing.T) {
	for _, doc := range []string{
		"services:\n  a:\n    image: x\n    enviroment: {A: b}\n",
		"services:\n  a:\n    image: x\n    depends_on: {b: {conditon: service_healthy}}\n",
		"version: '3'\nservices: {}\n",
	} {
		var f composeFile
		if err := decodeStrict([]byte(doc), &f); err == nil {
			t.Errorf("decoded without error:\n%s", doc)
		}
	}
}

func TestCompose(t *testing.T) {
	const path = "docker-compose.yml"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f composeFile
	if err := decodeStrict(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// Compose interpolates ${…} in values; "$$" is a literal "$" (as in
	// ${source.table} of a connector config).
	for name, s := range f.Services {
		for i, c := range s.Command {
			s.Command[i] = strings.ReplaceAll(c, "$$", "$")
		}
		f.Services[name] = s
	}
	for name, s := range f.Services {
		if s.Image == "" && s.Build == nil {
			t.Errorf("service %s: needs an image or a build", name)
		}
		for dep, d := range s.DependsOn {
			if _, ok := f.Services[dep]; !ok {
				t.Errorf("service %s depends on unknown service %s", name, dep)
			}
			if !slices.Contains([]string{"service_started", "service_healthy", "service_completed_successfully"}, d.Condition) {
				t.Errorf("service %s: depends_on %s: unknown condition %q", name, dep, d.Condition)
			}
			if d.Condition == "service_healthy" && f.Services[dep].Healthcheck == nil {
				t.Errorf("service %s waits for %s to be healthy, which has no healthcheck", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := f.Volumes[src]; !ok {
					t.Errorf("service %s mounts undeclared volume %s", name, src)
				}
			}
		}
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %s beyond the loopback interface", name, p)
			}
		}
	}

	t.Run("official images", func(t *testing.T) {
		for name, img := range map[string]string{
			"kafka":      harness.DefaultKafkaImage,
			"postgres":   "postgres:",
			"clickhouse": harness.DefaultClickHouseImage,
		} {
			s, ok := f.Services[name]
			switch {
			case !ok:
				t.Errorf("no service %s", name)
			case strings.HasSuffix(img, ":") && !strings.HasPrefix(s.Image, img):
				t.Errorf("service %s uses %s, want the official %s image", name, s.Image, img)
			case !strings.HasSuffix(img, ":") && s.Image != img:
				t.Errorf("service %s uses %s; the tests pin %s", name, s.Image, img)
			}
		}
		pg := f.Services["postgres"]
		if !strings.Contains(strings.Join(pg.Command, " "), "max_prepared_transactions=") {
			t.Errorf("postgres must start with -c max_prepared_transactions=N (exactly_once needs it), command %v", pg.Command)
		}
	})

	t.Run("txsink built from the Dockerfile with the example connector", func(t *testing.T) {
		const txName = "txsink"
		tx := f.Services[txName]
		if tx.Build == nil {
			t.Fatal("service txsink is not built")
		}
		df, _ := filepath.Abs(filepath.Join(filepath.Dir(path), tx.Build.Context, tx.Build.Dockerfile))
		if want, _ := filepath.Abs("Dockerfile"); df != want {
			t.Errorf("txsink is built from %s, want deploy/Dockerfile", df)
		}
		if tx.Healthcheck == nil || !slices.Equal(tx.Healthcheck.Test[:3], []string{"CMD", "/txsink", "healthcheck"}) {
			t.Errorf("txsink healthcheck should run /txsink healthcheck, got %+v", tx.Healthcheck)
		}
		// A one-shot service of the same image creates the connector over REST.
		found := false
		for name, s := range f.Services {
			if s.Image != tx.Image || name == txName || len(s.Profiles) > 0 || len(s.Command) < 2 || s.Command[0] != "connectors" || s.Command[1] != "create" {
				continue
			}
			found = true
			if s.DependsOn[txName].Condition != "service_healthy" {
				t.Errorf("%s must wait for %s to be healthy", name, txName)
			}
			i := slices.Index(s.Command, "-d")
			if i < 0 || i+1 >= len(s.Command) {
				t.Fatalf("%s: no inline connector (-d JSON)", name)
			}
			raw := validateConnector(t, name, []byte(s.Command[i+1]), connectors.Policy{})
			if raw == nil {
				continue
			}
			// The connection names the service of its sink.
			if svc := raw["connector.class"]; !strings.Contains(raw["connection.url"], "//"+svc+":") {
				t.Errorf("%s: connection.url %s does not name the %s service", name, raw["connection.url"], svc)
			}
		}
		if !found {
			t.Error("no service creates the example connector (txsink connectors create)")
		}
	})

	t.Run("cdc profile", func(t *testing.T) {
		// A source with logical replication, Connect with Debezium built on
		// the official images, and a txsink connector per sink applying
		// Debezium's topics, all in the profile (the default stays as it
		// was).
		for _, name := range []string{"source-db", "connect", "cdc-postgres-setup", "cdc-clickhouse-setup"} {
			if s, ok := f.Services[name]; !ok || !slices.Equal(s.Profiles, []string{"cdc"}) {
				t.Errorf("service %s: not in profile cdc (%v)", name, s.Profiles)
			}
		}
		src := f.Services["source-db"]
		if !strings.HasPrefix(src.Image, "postgres:") || !strings.Contains(strings.Join(src.Command, " "), "wal_level=logical") {
			t.Errorf("source-db: %s %v, want the official postgres image with -c wal_level=logical", src.Image, src.Command)
		}
		c := f.Services["connect"]
		if c.Build == nil || c.Build.Dockerfile != "deploy/debezium/Dockerfile" {
			t.Fatalf("connect is not built from deploy/debezium/Dockerfile: %+v", c.Build)
		}
		df, err := os.ReadFile(filepath.Join("debezium", "Dockerfile"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"ARG MAVEN_IMAGE=maven:", "ARG KAFKA_IMAGE=" + harness.DefaultKafkaImage, "deploy/debezium/pom.xml", "connect-standalone.sh"} {
			if !strings.Contains(string(df), want) {
				t.Errorf("deploy/debezium/Dockerfile lacks %q", want)
			}
		}
		props, err := os.ReadFile(filepath.Join("debezium", "postgres-source.properties"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"database.hostname=source-db", "plugin.name=pgoutput", "topic.prefix=shop"} {
			if !strings.Contains(string(props), want) {
				t.Errorf("deploy/debezium/postgres-source.properties lacks %q", want)
			}
		}
		for _, name := range []string{"cdc-postgres-setup", "cdc-clickhouse-setup"} {
			s := f.Services[name]
			i := slices.Index(s.Command, "-d")
			if i < 0 || i+1 >= len(s.Command) {
				t.Fatalf("%s: no inline connector", name)
			}
			var body struct {
				Config map[string]string `json:"config"`
			}
			if err := json.Unmarshal([]byte(s.Command[i+1]), &body); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if cfg := body.Config; cfg["cdc.format"] != "debezium" || cfg["topics.regex"] != `shop\.public\..*` || cfg["table.name.format"] != "${source.table}" {
				t.Errorf("%s: does not apply Debezium's shop.public.* topics by table: %v", name, cfg)
			}
		}
	})

	t.Run("cluster profile: three workers share a connector", func(t *testing.T) {
		var workers []string
		for name, s := range f.Services {
			if slices.Contains(s.Profiles, "cluster") && slices.Equal(s.Command, []string{"serve", "-listen", "0.0.0.0:8083"}) {
				workers = append(workers, name)
			}
		}
		sort.Strings(workers)
		if len(workers) != 3 {
			t.Fatalf("the cluster profile has %d workers, want 3: %v", len(workers), workers)
		}
		groups := map[string]bool{}
		var w config.Worker
		for _, name := range workers {
			env := f.Services[name].Environment
			lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
			var err error
			if w, err = config.LoadWorker("", lookup, nil); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !w.Cluster.Enabled || w.REST.AdvertisedHost != name {
				t.Errorf("%s: group.id %q, advertised host %q; want a cluster member advertising its service name", name, w.Cluster.GroupID, w.REST.AdvertisedHost)
			}
			groups[w.Cluster.GroupID] = true
			if f.Services[name].Healthcheck == nil {
				t.Errorf("%s has no healthcheck", name)
			}
		}
		if len(groups) != 1 {
			t.Errorf("the workers are in %d groups, want one cluster: %v", len(groups), groups)
		}
		found := false
		for name, s := range f.Services {
			if !slices.Contains(s.Profiles, "cluster") || len(s.Command) < 2 || s.Command[0] != "connectors" {
				continue
			}
			found = true
			i := slices.Index(s.Command, "-d")
			body := strings.ReplaceAll(s.Command[i+1], "$$", "$") // compose's escape of $
			raw := validateConnector(t, name, []byte(body), connectors.Policy{})
			reg := &connectors.Registry{}
			_ = reg.Register(postgres.Spec())
			if c := secrets.InClear(reg, raw); len(c) > 0 {
				t.Errorf("%s: secrets in clear in %v; the cluster refuses them", name, c)
			}
			res, err := providers.New(w.Providers)
			if err != nil {
				t.Fatal(err)
			}
			for k, v := range raw {
				for _, ref := range providers.Refs(v) {
					if !res.Knows(ref.Text) || ref.Provider == "env" && f.Services[workers[0]].Environment[ref.Key] == "" {
						t.Errorf("%s: %s: %s resolves on no worker", name, k, ref.Text)
					}
				}
			}
		}
		if !found {
			t.Error("no service of the cluster profile creates its connector")
		}
	})

	t.Run("docker compose config", func(t *testing.T) {
		var cmd *exec.Cmd
		switch {
		case exec.Command("docker", "compose", "version").Run() == nil:
			cmd = exec.Command("docker", "compose", "-f", path, "config", "-q")
		case lookPath("docker-compose"):
			cmd = exec.Command("docker-compose", "-f", path, "config", "-q")
		default:
			t.Skip("neither the docker compose plugin nor docker-compose is installed (Debian: apt-get install docker-compose); the strict decoding above still ran")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%v: %v\n%s", cmd.Args, err, out)
		}
	})
}

func lookPath(name string) bool {
	_, err := exec.LookPath(name)
	return err == nil
}

// TestDockerfile checks what the other files and the tests rely on.
func TestDockerfile(t *testing.T) {
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	gomod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(gomod))
	if goVer == nil {
		t.Fatal("go.mod has no go directive")
	}
	for _, want := range []string{
		"ARG GO_IMAGE=golang:" + goVer[1] + "-bookworm", // the official image of go.mod's Go
		"FROM ${GO_IMAGE} AS build",
		"CGO_ENABLED=0",
		"-trimpath",
		"FROM scratch",
		"USER 65532:65532",
		"EXPOSE 8083",
		`CMD ["/txsink", "healthcheck"`,
		`ENTRYPOINT ["/txsink"]`,
		`CMD ["serve", "-listen", "0.0.0.0:8083"]`,
		"ca-certificates.crt",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
}

// TestSystemdUnit checks the unit's hardening and, where systemd-analyze
// exists, lets systemd verify it.
func TestSystemdUnit(t *testing.T) {
	const path = "systemd/txsink.service"
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	settings := map[string][]string{}
	section := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case l[0] == '[':
			section = strings.Trim(l, "[]")
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				t.Errorf("%s: bad line %q", path, l)
			}
			settings[section+"."+k] = append(settings[section+"."+k], v)
		}
	}
	for k, v := range map[string]string{
		"Service.DynamicUser":     "yes",
		"Service.NoNewPrivileges": "yes",
		"Service.ProtectSystem":   "strict",
		"Service.ProtectHome":     "yes",
		"Service.PrivateTmp":      "yes",
		"Service.StateDirectory":  "txsink",
		"Service.KillSignal":      "SIGTERM",
		"Install.WantedBy":        "multi-user.target",
	} {
		if got := settings[k]; len(got) != 1 || got[0] != v {
			t.Errorf("%s = %v, want %s", k, got, v)
		}
	}
	if len(settings["Service.EnvironmentFile"]) == 0 {
		t.Error("no EnvironmentFile")
	}
	exe := settings["Service.ExecStart"]
	if len(exe) != 1 || !strings.Contains(exe[0], " serve ") || !strings.Contains(exe[0], "-data-dir /var/lib/txsink") {
		t.Errorf("ExecStart %v should run serve with the StateDirectory as data dir", exe)
	}

	if !lookPath("systemd-analyze") {
		t.Skip("systemd-analyze is not installed; the static checks above ran")
	}
	dir := t.TempDir()
	unit, _ := os.ReadFile(path)
	fake := filepath.Join(dir, "txsink")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	unit = bytes.ReplaceAll(unit, []byte("/usr/local/bin/txsink"), []byte(fake))
	up := filepath.Join(dir, "txsink.service")
	if err := os.WriteFile(up, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("systemd-analyze", "verify", up).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
