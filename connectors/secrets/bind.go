package secrets

import (
	"fmt"
	"maps"
	"sort"
	"strings"

	"github.com/txsink/txsink/config"
)

// Change is a PUT (Replace) or PATCH of a connector configuration.
type Change struct {
	Replace bool              // Set is the whole new configuration
	Set     map[string]string // settings sent
	Unset   []string          // settings removed
}

// Identity returns where and as whom a raw configuration's secrets are
// used: a canonical text of the sink's hosts, ports and user and of the
// converters' registries, without any secret.
type Identity func(raw map[string]string) (string, error)

// Bind merges change into the stored configuration old and resolves its
// secrets: a placeholder (Hidden, or a URL shown with its password Hidden)
// takes the stored secret back while the identity (hosts, ports, user) is
// unchanged; when it changed, every stored secret the change did not send
// again is dropped (a secret setting is removed, a URL keeps Hidden as its
// password). note is the connector's pending dropped-secret note ("" when
// none).
//
// Bind returns the new configuration, the settings it dropped, and the
// connector's new dropped-secret note: "" when none is pending (also when
// the change sent another secret, which supersedes what was dropped),
// otherwise a message for the connector named name that says what to send.
func Bind(l Lookup, identity Identity, name string, old map[string]string, change Change, note string) (next map[string]string, dropped []string, newNote string) {
	next = map[string]string{}
	if !change.Replace {
		next = maps.Clone(old)
	}
	for _, k := range change.Unset {
		delete(next, k)
	}
	maps.Copy(next, change.Set)
	defs := defsFor(l, next)
	// The identity is read with the placeholders taken back (a URL with
	// "[hidden]" as its password may not even parse).
	probe := maps.Clone(next)
	for k, v := range next {
		if ov, had := old[k]; had && v == Hidden {
			probe[k] = ov
		} else if had && strings.Contains(v, Hidden) {
			probe[k], _ = restoreURLPasswords(v, ov)
		}
	}
	oldID, oldErr := identity(old)
	newID, newErr := identity(probe)
	same := oldErr == nil && newErr == nil && oldID == newID
	resent := false
	for _, k := range change.Unset {
		if isSecretKey(defs, k) {
			resent = true // an explicit decision about the secret
		}
	}
	for k, v := range next {
		ov, had := old[k]
		_, sent := change.Set[k]
		secret := isSecretKey(defs, k)
		switch {
		case v == Hidden && secret:
			if had && same {
				next[k] = ov
			} else {
				delete(next, k)
				if had {
					dropped = append(dropped, k)
				}
			}
		case had && strings.Contains(v, Hidden) && len(urlSecrets(ov)) > 0:
			// A URL sent back as shown, its password hidden.
			if !same {
				dropped = append(dropped, k) // it keeps Hidden as its password
			} else if r, ok := restoreURLPasswords(v, ov); ok {
				next[k] = r
			}
		case !sent && !same && (secret || len(urlSecrets(v)) > 0):
			if secret {
				delete(next, k)
			} else {
				next[k] = RedactURL(v)
			}
			dropped = append(dropped, k)
		case sent && (secret || len(urlSecrets(v)) > 0):
			resent = true
		}
	}
	sort.Strings(dropped)
	switch {
	case resent:
		// What was sent supersedes what was dropped.
		note = ""
	case len(dropped) > 0:
		note = fmt.Sprintf("The stored secret of %s was dropped: the configuration moved the connector from %s to %s without sending it again. Send it again (PUT or PATCH /connectors/%s/config), or remove the setting with null if the new target needs none", strings.Join(dropped, ", "), orUnknown(oldID), orUnknown(newID), name)
	}
	return next, dropped, note
}

func orUnknown(s string) string {
	if s == "" {
		return "an unknown target"
	}
	return s
}

// CheckPlaceholders returns a field error for every secret setting of raw
// whose value is Hidden: the placeholder the API shows, standing for no
// stored secret (a create, or a setting the connector did not have).
func CheckPlaceholders(l Lookup, raw map[string]string) config.Errors {
	defs := defsFor(l, raw)
	var errs config.Errors
	for k, v := range raw {
		if v == Hidden && isSecretKey(defs, k) {
			errs = append(errs, config.FieldError{Name: k, Msg: Hidden + " is the placeholder the API shows for a secret, and there is no stored secret it stands for: send the secret itself"})
		}
	}
	return errs
}
