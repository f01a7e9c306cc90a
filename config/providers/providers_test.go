package providers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
)

func newResolver(t *testing.T, specs ...config.ProviderSpec) *Resolver {
	t.Helper()
	r, err := New(specs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestResolveFileEnvDir(t *testing.T) {
	dir := t.TempDir()
	props := filepath.Join(dir, "secrets.properties")
	if err := os.WriteFile(props, []byte("# db\npassword = s3cr:et\nuser=alice\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sdir := filepath.Join(dir, "k8s")
	if err := os.Mkdir(sdir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sdir, "pw"), []byte("from-dir"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TXSINK_PROVIDER_TEST_TOKEN", "no")
	t.Setenv("PROVIDER_TEST_TOKEN", "from-env")
	r := newResolver(t,
		config.ProviderSpec{Name: "file", Class: config.FileProviderClass},
		config.ProviderSpec{Name: "dir", Class: config.DirProviderClass},
		config.ProviderSpec{Name: "env", Class: config.EnvProviderClass})
	raw := map[string]string{
		"connection.password": "${file:" + props + ":password}",
		"connection.url":      "postgres://${file:" + props + ":user}@db:5432/x",
		"a":                   "${dir:" + sdir + ":pw}",
		"b":                   "${env:PROVIDER_TEST_TOKEN}",
		"table.name.format":   "${topic}",
	}
	got, err := r.Resolve(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"connection.password": "s3cr:et",
		"connection.url":      "postgres://alice@db:5432/x",
		"a":                   "from-dir",
		"b":                   "from-env",
		"table.name.format":   "${topic}",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if raw["connection.password"] == got["connection.password"] {
		t.Error("Resolve changed its input")
	}
	if !r.Knows(raw["connection.password"]) || r.Knows(raw["connection.url"]) || r.Knows("${vault:x:y}") {
		t.Error("Knows: want only whole references to configured providers")
	}
	if !IsReference("${env:X}") || IsReference("x${env:X}") || IsReference("${topic}") {
		t.Error("IsReference")
	}
}

func TestResolveErrorsNameTheSetting(t *testing.T) {
	dir := t.TempDir()
	props := filepath.Join(dir, "s.properties")
	_ = os.WriteFile(props, []byte("k=v\n"), 0o600)
	other := t.TempDir()
	otherProps := filepath.Join(other, "s.properties")
	_ = os.WriteFile(otherProps, []byte("k=SECRETVALUE\n"), 0o600)
	link := filepath.Join(dir, "escape.properties")
	if err := os.Symlink(otherProps, link); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TXSINK_REST_AUTH_BEARER_TOKEN", "SECRETVALUE")
	r := newResolver(t,
		config.ProviderSpec{Name: "file", Class: config.FileProviderClass, Params: map[string]string{config.ProviderAllowedPaths: dir}},
		config.ProviderSpec{Name: "env", Class: config.EnvProviderClass})
	for _, c := range []struct {
		value string
		want  error
	}{
		{"${vault:secret/db:pw}", ErrUnknownProvider},
		{"${file:" + props + ":missing}", ErrMissing},
		{"${file:" + filepath.Join(dir, "nope") + ":k}", ErrMissing},
		{"${file:" + otherProps + ":k}", ErrNotAllowed},
		{"${file:" + link + ":k}", ErrNotAllowed},
		{"${file:" + dir + "/../" + filepath.Base(other) + "/s.properties:k}", ErrNotAllowed},
		{"${file:relative.properties:k}", ErrMalformed},
		{"${env:TXSINK_REST_AUTH_BEARER_TOKEN}", ErrNotAllowed},
		{"${env:PROVIDER_TEST_UNSET_X}", ErrMissing},
	} {
		_, err := r.Resolve(context.Background(), map[string]string{"connection.password": c.value})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.value, err, c.want)
			continue
		}
		var ferrs config.Errors
		if !errors.As(err, &ferrs) || len(ferrs) != 1 || ferrs[0].Name != "connection.password" {
			t.Errorf("%s: want one field error naming connection.password, got %v", c.value, err)
		}
		if got := err.Error(); strings.Contains(got, "SECRETVALUE") {
			t.Errorf("%s: the error shows a value: %s", c.value, got)
		}
	}
}

func TestEnvAllowlist(t *testing.T) {
	t.Setenv("APP_DB_PASSWORD", "pw")
	t.Setenv("OTHER", "x")
	r := newResolver(t, config.ProviderSpec{Name: "env", Class: config.EnvProviderClass, Params: map[string]string{config.ProviderAllowlistPattern: "APP_.*"}})
	if got, err := r.Resolve(context.Background(), map[string]string{"p": "${env:APP_DB_PASSWORD}"}); err != nil || got["p"] != "pw" {
		t.Fatalf("allowed name: %v %v", got, err)
	}
	if _, err := r.Resolve(context.Background(), map[string]string{"p": "${env:OTHER}"}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("name outside the allowlist: %v", err)
	}
}

func TestNilResolverPassesThrough(t *testing.T) {
	r, err := New(nil)
	if err != nil || r != nil {
		t.Fatalf("New(nil) = %v, %v", r, err)
	}
	raw := map[string]string{"p": "${file:/x:y}"}
	got, err := r.Resolve(context.Background(), raw)
	if err != nil || got["p"] != raw["p"] {
		t.Fatalf("nil resolver: %v %v", got, err)
	}
}
