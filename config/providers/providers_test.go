package providers

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
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
	got, values, err := r.Resolve(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	// Every value a reference was replaced with, whatever the setting
	// (the user inside a URL too): the secrets to scrub.
	if want := []string{"from-dir", "from-env", "s3cr:et", "alice"}; !slices.Equal(values, want) {
		t.Errorf("values = %q, want %q", values, want)
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
		_, _, err := r.Resolve(context.Background(), map[string]string{"connection.password": c.value})
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
	if got, _, err := r.Resolve(context.Background(), map[string]string{"p": "${env:APP_DB_PASSWORD}"}); err != nil || got["p"] != "pw" {
		t.Fatalf("allowed name: %v %v", got, err)
	}
	if _, _, err := r.Resolve(context.Background(), map[string]string{"p": "${env:OTHER}"}); !errors.Is(err, ErrNotAllowed) {
		t.Fatalf("name outside the allowlist: %v", err)
	}
}

func TestNilResolverPassesThrough(t *testing.T) {
	r, err := New(nil)
	if err != nil || r != nil {
		t.Fatalf("New(nil) = %v, %v", r, err)
	}
	raw := map[string]string{"p": "${file:/x:y}"}
	got, values, err := r.Resolve(context.Background(), raw)
	if err != nil || got["p"] != raw["p"] || values != nil {
		t.Fatalf("nil resolver: %v %v", got, err)
	}
}

// TestDirProviderSymlinks: the dir provider applies allowed.paths to where
// a file's symbolic links lead. Kubernetes' Secret volume layout, whose
// files are links into a timestamped directory through ..data, keeps
// working; links that leave the allowed directory (absolute, "../",
// chained, a link to a directory outside, a link under a link) are
// refused with an error that names the setting and never the value.
func TestDirProviderSymlinks(t *testing.T) {
	root := t.TempDir()
	secretDir := filepath.Join(root, "secret") // the allowed directory, as mounted
	ts := filepath.Join(secretDir, "..2026_12_03_10_00_00.123456789")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{ts, outside, filepath.Join(outside, "sub")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, v string) {
		if err := os.WriteFile(p, []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := func(target, name string) {
		if err := os.Symlink(target, name); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(ts, "PGPASSWORD"), "k8s-pw")
	write(filepath.Join(ts, "PGUSER"), "k8s-user")
	write(filepath.Join(outside, "stolen"), "OUTSIDEVALUE")
	write(filepath.Join(outside, "sub", "stolen"), "OUTSIDEVALUE")
	// Kubernetes' layout: ..data -> ..<timestamp> (relative), KEY -> ..data/KEY.
	link(filepath.Base(ts), filepath.Join(secretDir, "..data"))
	link("..data/PGPASSWORD", filepath.Join(secretDir, "PGPASSWORD"))
	link("..data/PGUSER", filepath.Join(secretDir, "PGUSER"))
	// Links out of it.
	link(filepath.Join(outside, "stolen"), filepath.Join(secretDir, "abs"))
	link("../outside/stolen", filepath.Join(secretDir, "rel"))
	link("rel", filepath.Join(secretDir, "chain"))                           // -> rel -> ../outside/stolen
	link("..data/../../outside/stolen", filepath.Join(secretDir, "through")) // inside first, then out
	link(filepath.Join(outside, "sub"), filepath.Join(secretDir, "subdir"))  // a directory outside
	link(filepath.Join(outside, "sub"), filepath.Join(ts, "nested"))         // ..data/nested -> outside
	link(filepath.Join(outside, "gone"), filepath.Join(secretDir, "dangling"))

	r := newResolver(t, config.ProviderSpec{Name: "dir", Class: config.DirProviderClass, Params: map[string]string{config.ProviderAllowedPaths: secretDir}})
	got, values, err := r.Resolve(context.Background(), map[string]string{
		"connection.password": "${dir:" + secretDir + ":PGPASSWORD}",
		"connection.user":     "${dir:" + secretDir + ":PGUSER}",
		"x":                   "${dir:" + filepath.Join(secretDir, "..data") + ":PGUSER}",
	})
	if err != nil {
		t.Fatalf("Kubernetes' Secret layout: %v", err)
	}
	if got["connection.password"] != "k8s-pw" || got["connection.user"] != "k8s-user" || got["x"] != "k8s-user" || len(values) != 2 {
		t.Fatalf("Kubernetes' Secret layout: got %v (values %q)", got, values)
	}
	for _, c := range []struct {
		ref  string
		want error
	}{
		{"${dir:" + secretDir + ":abs}", ErrNotAllowed},
		{"${dir:" + secretDir + ":rel}", ErrNotAllowed},
		{"${dir:" + secretDir + ":chain}", ErrNotAllowed},
		{"${dir:" + secretDir + ":through}", ErrNotAllowed},
		{"${dir:" + secretDir + ":subdir}", ErrNotAllowed},
		{"${dir:" + filepath.Join(secretDir, "subdir") + ":stolen}", ErrNotAllowed},
		{"${dir:" + filepath.Join(secretDir, "..data", "nested") + ":stolen}", ErrNotAllowed},
		{"${dir:" + secretDir + "/../outside:stolen}", ErrNotAllowed},
		{"${dir:" + secretDir + ":dangling}", ErrMissing},
	} {
		_, _, err := r.Resolve(context.Background(), map[string]string{"database.name": c.ref})
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.ref, err, c.want)
			continue
		}
		var ferrs config.Errors
		if !errors.As(err, &ferrs) || len(ferrs) != 1 || ferrs[0].Name != "database.name" {
			t.Errorf("%s: want one field error naming database.name, got %v", c.ref, err)
		}
		if msg := err.Error(); strings.Contains(msg, "OUTSIDEVALUE") || strings.Contains(msg, outside) {
			t.Errorf("%s: the error shows a value or where the link leads: %s", c.ref, msg)
		}
	}
	// The file provider reads through the same rule, links included.
	fr := newResolver(t, config.ProviderSpec{Name: "file", Class: config.FileProviderClass, Params: map[string]string{config.ProviderAllowedPaths: secretDir}})
	write(filepath.Join(ts, "db.properties"), "pw=k8s-props\n")
	link("..data/db.properties", filepath.Join(secretDir, "db.properties"))
	link("../outside/stolen", filepath.Join(secretDir, "out.properties"))
	if got, _, err := fr.Resolve(context.Background(), map[string]string{"p": "${file:" + secretDir + "/db.properties:pw}"}); err != nil || got["p"] != "k8s-props" {
		t.Errorf("file provider through ..data: %v %v", got, err)
	}
	if _, _, err := fr.Resolve(context.Background(), map[string]string{"p": "${file:" + secretDir + "/out.properties:pw}"}); !errors.Is(err, ErrNotAllowed) {
		t.Errorf("file provider through a link out: %v", err)
	}
}
