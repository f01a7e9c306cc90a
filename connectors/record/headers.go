package record

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
)

// HeadersJSON renders a record's headers for a dead-letter row, the same
// in every sink: a JSON array of {"key", "value"} objects in header order;
// a value that is not valid UTF-8 or holds NUL (which PostgreSQL's text and
// jsonb refuse) is given as "value_base64" instead, and a key is made
// valid UTF-8 with NUL written as \0. ok is false without headers.
func HeadersJSON(hs []kgo.RecordHeader) (text string, ok bool) {
	if len(hs) == 0 {
		return "", false
	}
	type header struct {
		Key         string  `json:"key"`
		Value       *string `json:"value,omitempty"`
		ValueBase64 *string `json:"value_base64,omitempty"`
	}
	out := make([]header, len(hs))
	for i, h := range hs {
		out[i].Key = CleanText(h.Key)
		if utf8.Valid(h.Value) && !strings.ContainsRune(string(h.Value), 0) {
			v := string(h.Value)
			out[i].Value = &v
		} else {
			v := base64.StdEncoding.EncodeToString(h.Value)
			out[i].ValueBase64 = &v
		}
	}
	b, _ := json.Marshal(out)
	return string(b), true
}

// CleanText makes s storable in any text column: valid UTF-8 (invalid
// bytes become U+FFFD) and no NUL (written as \0).
func CleanText(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.ReplaceAll(s, "\x00", `\0`)
}
