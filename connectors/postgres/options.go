package postgres

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrDurability is wrapped by the error about a session setting that would
// weaken the durability of committed batches.
var ErrDurability = errors.New("weakens durability")

// sessionSettings are the settings the options connection parameter may
// set (-c name=value or --name=value), each with a check of its value
// (nil: any value PostgreSQL accepts).
var sessionSettings = map[string]func(v string) error{
	"application_name":                    nil,
	"datestyle":                           nil,
	"extra_float_digits":                  nil,
	"idle_in_transaction_session_timeout": nil,
	"intervalstyle":                       nil,
	"jit":                                 nil,
	"lock_timeout":                        nil,
	"maintenance_work_mem":                nil,
	"search_path":                         nil,
	"statement_timeout":                   nil,
	"temp_buffers":                        nil,
	"timezone":                            nil,
	"work_mem":                            nil,
	"synchronous_commit": func(v string) error {
		// PostgreSQL's spellings of "on" (its boolean synonyms), and
		// remote_apply, which waits for more.
		if slices.Contains([]string{"on", "true", "yes", "1", "remote_apply"}, strings.ToLower(v)) {
			return nil
		}
		return fmt.Errorf("synchronous_commit=%s %w: a crash could lose a transaction PostgreSQL already reported committed, and with it exactly-once delivery (allowed: on, remote_apply)", v, ErrDurability)
	},
}

// durabilitySettings are server settings that trade durability for speed;
// naming one in options gets the durability error (most cannot be set per
// session anyway).
var durabilitySettings = []string{"fsync", "full_page_writes", "wal_sync_method", "wal_level", "commit_delay", "commit_siblings", "synchronous_standby_names"}

// checkOptions validates the options connection parameter the way the
// server reads it (the backend splits it at unescaped white space, a
// backslash escaping the next character, and reads each word as a
// command-line switch): only "-c name=value", "-cname=value" and
// "--name=value" are accepted, with a name of sessionSettings.
func checkOptions(opts string) error {
	words := splitOptions(opts)
	for i := 0; i < len(words); i++ {
		w := words[i]
		var setting string
		switch {
		case w == "-c":
			if i+1 == len(words) {
				return errors.New("-c needs name=value")
			}
			i++
			setting = words[i]
		case strings.HasPrefix(w, "--"):
			setting = w[2:]
		case strings.HasPrefix(w, "-c"):
			setting = w[2:]
		default:
			return fmt.Errorf("only session settings (-c name=value or --name=value) are allowed, got %q", w)
		}
		name, value, ok := strings.Cut(setting, "=")
		if !ok {
			return fmt.Errorf("%q: want name=value", setting)
		}
		name = strings.ToLower(strings.ReplaceAll(name, "-", "_"))
		if slices.Contains(durabilitySettings, name) {
			return fmt.Errorf("%s %w of committed batches and is refused", name, ErrDurability)
		}
		check, allowed := sessionSettings[name]
		if !allowed {
			return fmt.Errorf("session setting %q is not allowed (allowed: %s)", name, strings.Join(slices.Sorted(maps.Keys(sessionSettings)), ", "))
		}
		if check != nil {
			if err := check(value); err != nil {
				return err
			}
		}
	}
	return nil
}

// splitOptions is PostgreSQL's pg_split_opts.
func splitOptions(s string) []string {
	var out []string
	isSpace := func(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' }
	for i := 0; i < len(s); {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			break
		}
		var b strings.Builder
		escaped := false
		for ; i < len(s); i++ {
			c := s[i]
			if isSpace(c) && !escaped {
				break
			}
			if !escaped && c == '\\' {
				escaped = true
				continue
			}
			escaped = false
			b.WriteByte(c)
		}
		out = append(out, b.String())
	}
	return out
}
