package api

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
)

// settings is a connector configuration as a request body carries it: a
// JSON object of strings. As in Kafka Connect, a JSON number or boolean is
// accepted and stored as its JSON text ("tasks.max": 1 becomes "1",
// true becomes "true"). A null is refused with the setting named (Connect
// refuses it too, with HTTP 500), and so is an object or an array.
type settings map[string]string

// UnmarshalJSON implements json.Unmarshaler. A JSON null for the whole
// object leaves s nil.
func (s *settings) UnmarshalJSON(b []byte) error {
	vals, err := decodeSettings(b, false)
	if err != nil || vals == nil {
		return err
	}
	out := make(settings, len(vals))
	for k, v := range vals {
		out[k] = *v
	}
	*s = out
	return nil
}

// patchSettings is the body of PATCH …/config: settings where null
// removes a setting (Connect 3.8+).
type patchSettings map[string]*string

// UnmarshalJSON implements json.Unmarshaler.
func (s *patchSettings) UnmarshalJSON(b []byte) error {
	vals, err := decodeSettings(b, true)
	if err != nil || vals == nil {
		return err
	}
	*s = vals
	return nil
}

// decodeSettings reads a JSON object of setting values. Strings stay as
// they are; numbers and booleans become their JSON text; null is nil when
// allowNull, an error naming the setting otherwise; objects and arrays
// are errors naming the setting. It returns nil for a JSON null.
func decodeSettings(b []byte, allowNull bool) (map[string]*string, error) {
	if string(bytes.TrimSpace(b)) == "null" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, err
	}
	out := make(map[string]*string, len(raw))
	// Sorted, so that the first offending setting named is always the same.
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := bytes.TrimSpace(raw[k])
		switch {
		case len(v) == 0:
			return nil, badRequest("Connector setting %s has no value", strconv.Quote(k))
		case v[0] == '"':
			var str string
			if err := json.Unmarshal(v, &str); err != nil {
				return nil, err
			}
			out[k] = &str
		case string(v) == "null":
			if !allowNull {
				return nil, badRequest("Connector setting %s is null: a setting is a string (JSON numbers and booleans are stored as strings); leave it out to use its default", strconv.Quote(k))
			}
			out[k] = nil
		case string(v) == "true" || string(v) == "false":
			str := string(v)
			out[k] = &str
		case v[0] == '{' || v[0] == '[':
			kind := "an object"
			if v[0] == '[' {
				kind = "an array"
			}
			return nil, badRequest("Connector setting %s is %s: a setting is a string (JSON numbers and booleans are stored as strings)", strconv.Quote(k), kind)
		default:
			var n json.Number
			if err := json.Unmarshal(v, &n); err != nil {
				return nil, err
			}
			str := strings.TrimSpace(n.String())
			out[k] = &str
		}
	}
	return out, nil
}
