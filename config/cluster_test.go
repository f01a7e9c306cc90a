package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestClusterSettings(t *testing.T) {
	w, err := LoadWorker("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if w.Cluster.Enabled {
		t.Fatal("no group.id: standalone")
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "worker.properties")
	_ = os.WriteFile(file, []byte(`group.id=txsink-prod
config.storage.topic=txsink-configs
status.storage.topic=txsink-status
offset.storage.topic=connect-offsets
config.storage.replication.factor=-1
status.storage.partitions=3
session.timeout.ms=6000
heartbeat.interval.ms=1000
scheduled.rebalance.max.delay.ms=0
rest.advertised.host.name=txsink-1.txsink
rest.advertised.port=8083
config.providers=file,vault
config.providers.file.param.allowed.paths=/etc/txsink/secrets
config.providers.vault.class=org.apache.kafka.common.config.provider.DirectoryConfigProvider
`), 0o600)
	w, err = LoadWorker(file, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := w.Cluster
	if !c.Enabled || c.GroupID != "txsink-prod" || c.ConfigTopic != "txsink-configs" || c.StatusTopic != "txsink-status" ||
		c.ConfigReplication != -1 || c.StatusReplication != 3 || c.StatusPartitions != 3 ||
		c.Session != 6*time.Second || c.Heartbeat != time.Second || c.Rebalance != time.Minute || c.MaxDelay != 0 {
		t.Errorf("cluster: %+v", c)
	}
	if strings.Join(c.IgnoredOffsetSettings, ",") != KeyOffsetTopic {
		t.Errorf("ignored offset settings: %v", c.IgnoredOffsetSettings)
	}
	if len(w.Providers) != 2 || w.Providers[0].Class != FileProviderClass || w.Providers[0].Params[ProviderAllowedPaths] != "/etc/txsink/secrets" ||
		w.Providers[1].Name != "vault" || w.Providers[1].Class != DirProviderClass {
		t.Errorf("providers: %+v", w.Providers)
	}
	if id := w.AdvertisedID(nil, "host"); id != "txsink-1.txsink:8083" {
		t.Errorf("advertised id %q", id)
	}
	env := map[string]string{"TXSINK_CONFIG_PROVIDERS": "secrets", "TXSINK_CONFIG_PROVIDERS_SECRETS_CLASS": EnvProviderClass}
	w, err = LoadWorker("", func(k string) (string, bool) { v, ok := env[k]; return v, ok }, nil)
	if err != nil || len(w.Providers) != 1 || w.Providers[0].Class != EnvProviderClass {
		t.Errorf("providers from the environment: %+v %v", w.Providers, err)
	}
}

func TestClusterSettingErrorsNameTheSetting(t *testing.T) {
	base := map[string]string{KeyClusterGroupID: "g", KeyConfigTopic: "c", KeyStatusTopic: "s"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	for _, c := range []struct {
		raw  map[string]string
		want string
	}{
		{with(KeyConfigTopic, ""), "config.storage.topic: distributed mode"},
		{with(KeyStatusTopic, ""), "status.storage.topic: distributed mode"},
		{with(KeyStatusTopic, "c"), "status.storage.topic: must differ"},
		{with(KeyHeartbeatIntervalMs, "20000"), "heartbeat.interval.ms: must be below session.timeout.ms"},
		{with(KeyRebalanceTimeoutMs, "1000"), "rebalance.timeout.ms: must be at least session.timeout.ms"},
		{with(KeyWorkerID, "w1"), "worker.id: in distributed mode"},
		{with(KeyConfigReplication, "0"), "config.storage.replication.factor: must be -1"},
		{with(KeyRESTAdvertisedListener, "ftp"), "rest.advertised.listener: invalid value"},
		{with(KeyConfigProviders, "file", "config.providers.other.class", FileProviderClass), `config.providers.other.class: provider "other" is not listed`},
		{with(KeyConfigProviders, "vault"), `config.providers.vault.class: provider "vault" needs a class`},
		{with(KeyConfigProviders, "file", "config.providers.file.class", "com.example.Vault"), `unknown class "com.example.Vault"`},
		{with(KeyConfigProviders, "file", "config.providers.file.param.allowlist.pattern", ".*"), `config.providers.file.param.allowlist.pattern: ` + FileProviderClass + ` has no parameter`},
		{with(KeyConfigProviders, "env", "config.providers.env.param.allowlist.pattern", "("), "not a regular expression"},
		{with(KeyConfigProviders, "file", "config.providers.file.param.allowed.paths", "secrets"), "allowed paths must be absolute"},
		{with(KeyConfigProviders, "a b"), "config.providers: \"a b\""},
	} {
		_, err := LoadWorker("", nil, c.raw)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.raw, err, c.want)
		}
	}
	if _, err := LoadWorker("", nil, map[string]string{KeyConfigTopic: "c"}); err != nil {
		t.Errorf("cluster settings without group.id are ignored, got %v", err)
	}
}
