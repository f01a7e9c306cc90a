package config_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors"
	"github.com/txsink/txsink/connectors/postgres"
)

// vendorConfig is one file of testdata/vendor (see its README.md).
type vendorConfig struct {
	Origin string            `json:"origin"`
	Vendor string            `json:"vendor"`
	Config map[string]string `json:"config"`
}

// LoadVendorConfigs reads testdata/vendor.
func loadVendorConfigs(t *testing.T) map[string]vendorConfig {
	t.Helper()
	files, err := filepath.Glob("testdata/vendor/*.json")
	if err != nil || len(files) < 5 {
		t.Fatalf("vendor configurations: %v (%d files)", err, len(files))
	}
	out := map[string]vendorConfig{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var vc vendorConfig
		dec := json.NewDecoder(strings.NewReader(string(b)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&vc); err != nil || vc.Origin == "" || vc.Vendor == "" {
			t.Fatalf("%s: %v (origin and vendor are required)", f, err)
		}
		out[filepath.Base(f)] = vc
	}
	return out
}

// TestVendorConfigsMigrate feeds the Confluent and Debezium JDBC sinks'
// documented configurations through txsink's validation (as validate,
// POST and PUT run it; connector.class replaced) and checks every setting
// against the migration page: a setting txsink defines keeps its value, a
// setting txsink needs not is accepted, one txsink refuses is refused
// with the page's advice, and none is left unclassified. It also checks
// that the page lists every setting of both vendors, with its advice, and
// that the all-defaults files name every setting of their vendor.
func TestVendorConfigsMigrate(t *testing.T) {
	var reg connectors.Registry
	if err := reg.Register(postgres.Spec()); err != nil {
		t.Fatal(err)
	}
	spec, _ := reg.Lookup("postgres")
	defs := spec.AllDefs()
	page, err := os.ReadFile(filepath.Join("..", config.MigrationPage))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	refusedSeen, acceptedSeen := 0, 0
	for file, vc := range loadVendorConfigs(t) {
		t.Run(file, func(t *testing.T) {
			raw := map[string]string{}
			for k, v := range vc.Config {
				raw[k] = v
			}
			raw[config.KeyClass] = postgres.Class
			_, values, errs := reg.Validate(raw)
			rep := config.CheckKeys(raw, defs)
			if len(rep.Unknown) > 0 {
				t.Errorf("settings neither txsink's, Connect's nor in config.ForeignKeys: %v", rep.Unknown)
			}
			// The settings' own checks (type, enum, range), without the
			// rules across settings: the Debezium example's delete.enabled
			// needs pk.mode=record_key, which its refused primary.key.mode
			// meant to set.
			_, own := defs.Validate(raw)
			for k, v := range vc.Config {
				seen[k] = true
				if k == config.KeyClass {
					continue
				}
				if _, ok := defs.Lookup(k); ok {
					// Same name, same meaning: the value is txsink's.
					if len(own.For(k)) > 0 {
						t.Errorf("%s=%q: refused: %v", k, v, own.For(k))
					} else if strings.TrimSpace(values[k]) != strings.TrimSpace(v) && v != "" {
						t.Errorf("%s=%q: parsed as %q", k, v, values[k])
					}
					acceptedSeen++
					continue
				}
				f, ok := config.LookupForeign(k)
				if !ok {
					if k == config.KeyName || k == config.KeyClass {
						continue
					}
					if !strings.HasPrefix(k, "connection.") && !strings.HasPrefix(k, "hibernate.") {
						t.Errorf("%s: not in config.ForeignKeys", k)
					}
					if len(errs.For(k)) > 0 {
						t.Errorf("%s: refused: %v", k, errs.For(k))
					}
					continue
				}
				refuse := f.Kind == config.Unsupported && (f.Same == nil || !f.Same(strings.TrimSpace(v)))
				got := errs.For(k)
				switch {
				case refuse && (len(got) != 1 || !strings.Contains(got[0], f.Advice)):
					t.Errorf("%s=%q: want refused with the page's advice %q, got %v", k, v, f.Advice, got)
				case !refuse && len(got) > 0:
					t.Errorf("%s=%q: want accepted, got %v", k, v, got)
				case refuse:
					refusedSeen++
					// config.ignore.unsupported keeps it.
					with := map[string]string{}
					for k2, v2 := range raw {
						with[k2] = v2
					}
					with[config.KeyIgnoreUnsupported] = k
					if _, _, errs := reg.Validate(with); len(errs.For(k)) > 0 {
						t.Errorf("%s listed in %s: still refused: %v", k, config.KeyIgnoreUnsupported, errs.For(k))
					}
				default:
					acceptedSeen++
				}
			}
		})
	}
	for _, f := range config.ForeignKeys {
		name := "`" + f.Name + "`"
		if f.Prefix {
			name = "`" + f.Name + "*`"
		}
		row := ""
		for _, line := range strings.Split(string(page), "\n") {
			if strings.HasPrefix(line, "| "+name+" |") {
				row = line
			}
		}
		if row == "" || !strings.Contains(row, strings.ReplaceAll(f.Advice, "|", "\\|")) {
			t.Errorf("%s: no row with its advice on %s", f.Name, config.MigrationPage)
		}
		if !f.Prefix && !seen[f.Name] {
			t.Errorf("%s (%s): in no vendor configuration of testdata/vendor", f.Name, strings.Join(f.Vendors, ", "))
		}
	}
	if refusedSeen < 10 || acceptedSeen < 30 {
		t.Errorf("%d refused and %d accepted settings: the vendor configurations lost cases", refusedSeen, acceptedSeen)
	}
	if !slices.ContainsFunc(config.ForeignKeys, func(f config.ForeignKey) bool { return f.Name == "fields.whitelist" }) {
		t.Error("fields.whitelist is not a foreign setting")
	}
}
