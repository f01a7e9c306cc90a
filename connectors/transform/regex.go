package transform

import (
	"regexp"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/txsink/txsink/connectors/record"
)

// Class names of the routing transform and the predicates.
const (
	ClassRegexRouter       = "org.apache.kafka.connect.transforms.RegexRouter"
	ClassTopicNameMatches  = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"
	ClassHasHeaderKey      = "org.apache.kafka.connect.transforms.predicates.HasHeaderKey"
	ClassRecordIsTombstone = "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone"
)

func init() {
	registerTransform(TransformPlugin{Class: ClassRegexRouter, Aliases: []string{"RegexRouter"}, New: newRegexRouter})
	registerPredicate(PredicatePlugin{Class: ClassTopicNameMatches, Aliases: []string{"TopicNameMatches"}, New: newTopicNameMatches})
	registerPredicate(PredicatePlugin{Class: ClassHasHeaderKey, Aliases: []string{"HasHeaderKey"}, New: newHasHeaderKey})
	registerPredicate(PredicatePlugin{Class: ClassRecordIsTombstone, Aliases: []string{"RecordIsTombstone"}, New: newRecordIsTombstone})
}

// javaRegex is a regular expression written for java.util.regex,
// compiled with Go's RE2 syntax, which agrees with Java's on what topic
// patterns use (classes, groups, named groups (?<name>…), alternation,
// greedy and lazy quantifiers, \Q…\E) and refuses what RE2 cannot do in
// linear time (lookaround, backreferences, possessive quantifiers,
// atomic groups).
type javaRegex struct {
	re   *regexp.Regexp // unanchored: Matcher.find
	full *regexp.Regexp // anchored at both ends: Matcher.matches
}

func compileJavaRegex(c *conf, name, expr string) javaRegex {
	re, err := regexp.Compile(expr)
	if err == nil {
		var full *regexp.Regexp
		full, err = regexp.Compile(`\A(?:` + expr + `)\z`)
		if err == nil {
			return javaRegex{re: re, full: full}
		}
	}
	c.fail(name, "invalid regular expression %q: %v (txsink uses RE2 syntax, which has no lookaround, backreferences, possessive quantifiers or atomic groups)", expr, err)
	return javaRegex{}
}

// replacement is a java.util.regex replacement string, parsed as
// Matcher.appendReplacement reads it: $n and ${name} refer to groups
// ($ followed by digits takes as many digits as still name an existing
// group: with 3 groups, "$12" is group 1 then "2"), \x is a literal x.
type replacement []replPart

type replPart struct {
	lit   string
	group int // -1 for a literal
}

func parseReplacement(c *conf, name, s string, re *regexp.Regexp) replacement {
	if re == nil {
		return nil
	}
	var out replacement
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			out = append(out, replPart{lit: lit.String(), group: -1})
			lit.Reset()
		}
	}
	groups := re.NumSubexp()
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
			if i == len(s) {
				c.fail(name, "invalid replacement %q: character to be escaped is missing", s)
				return nil
			}
			lit.WriteByte(s[i])
		case '$':
			i++
			if i == len(s) {
				c.fail(name, "invalid replacement %q: illegal group reference: group index is missing", s)
				return nil
			}
			if s[i] == '{' {
				end := strings.IndexByte(s[i:], '}')
				if end < 0 {
					c.fail(name, "invalid replacement %q: named capturing group is missing trailing '}'", s)
					return nil
				}
				gname := s[i+1 : i+end]
				g := re.SubexpIndex(gname)
				if gname == "" || g < 0 {
					c.fail(name, "invalid replacement %q: no group with name {%s} in %q", s, gname, re.String())
					return nil
				}
				flush()
				out = append(out, replPart{group: g})
				i += end
				continue
			}
			if s[i] < '0' || s[i] > '9' {
				c.fail(name, "invalid replacement %q: illegal group reference (use \\$ for a literal $)", s)
				return nil
			}
			g := int(s[i] - '0')
			for i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9' {
				next := g*10 + int(s[i+1]-'0')
				if next > groups {
					break
				}
				g = next
				i++
			}
			if g > groups {
				c.fail(name, "invalid replacement %q: no group %d in %q (it has %d)", s, g, re.String(), groups)
				return nil
			}
			flush()
			out = append(out, replPart{group: g})
		default:
			lit.WriteByte(s[i])
		}
	}
	flush()
	return out
}

// expand appends the replacement for the match loc (a
// FindStringSubmatchIndex result) in src; an unmatched group adds
// nothing, as in Java.
func (r replacement) expand(dst []byte, src string, loc []int) []byte {
	for _, p := range r {
		if p.group < 0 {
			dst = append(dst, p.lit...)
			continue
		}
		if a, b := loc[2*p.group], loc[2*p.group+1]; a >= 0 {
			dst = append(dst, src[a:b]...)
		}
	}
	return dst
}

// regexRouter is Kafka Connect's RegexRouter: when regex matches the
// whole topic, the topic becomes the topic with its first match replaced
// by replacement (Matcher.matches, then replaceFirst). The topic names
// the table, so this routes records to tables.
type regexRouter struct {
	rx   javaRegex
	repl replacement
	// routes caches the result per topic: a connector reads few topics.
	routes sync.Map // string → string
	n      atomic.Int64
}

func newRegexRouter(settings map[string]string) (Transform, error) {
	c := newConf("RegexRouter", settings)
	t := &regexRouter{}
	t.rx = compileJavaRegex(c, "regex", c.required("regex"))
	t.repl = parseReplacement(c, "replacement", c.required("replacement"), t.rx.re)
	if err := c.done(); err != nil {
		return nil, err
	}
	return t, nil
}

func (t *regexRouter) Apply(r *record.Record) (bool, error) {
	from := r.Topic
	if to, ok := t.routes.Load(from); ok {
		r.Topic = to.(string)
	} else {
		to := t.route(from)
		if t.n.Add(1) > cacheMax {
			t.routes.Clear()
			t.n.Store(1)
		}
		t.routes.Store(from, to)
		r.Topic = to
	}
	if r.Topic == "" {
		return false, errRecord("RegexRouter: topic %q is routed to an empty name", from)
	}
	return true, nil
}

func (t *regexRouter) route(topic string) string {
	if !t.rx.full.MatchString(topic) {
		return topic
	}
	loc := t.rx.re.FindStringSubmatchIndex(topic)
	b := make([]byte, 0, len(topic)+16)
	b = append(b, topic[:loc[0]]...)
	b = t.repl.expand(b, topic, loc)
	b = append(b, topic[loc[1]:]...)
	return string(b)
}

// topicNameMatches is Connect's TopicNameMatches predicate: true when
// pattern matches the whole (current) topic name.
type topicNameMatches struct{ rx javaRegex }

func newTopicNameMatches(settings map[string]string) (Predicate, error) {
	c := newConf("TopicNameMatches", settings)
	p := &topicNameMatches{rx: compileJavaRegex(c, "pattern", c.nonEmpty("pattern"))}
	if err := c.done(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *topicNameMatches) Test(r *record.Record) bool { return p.rx.full.MatchString(r.Topic) }

// hasHeaderKey is Connect's HasHeaderKey predicate: true when the record
// has at least one header called name.
type hasHeaderKey struct{ name string }

func newHasHeaderKey(settings map[string]string) (Predicate, error) {
	c := newConf("HasHeaderKey", settings)
	p := &hasHeaderKey{name: c.nonEmpty("name")}
	if err := c.done(); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *hasHeaderKey) Test(r *record.Record) bool {
	for _, h := range r.Headers {
		if h.Key == p.name {
			return true
		}
	}
	return false
}

// recordIsTombstone is Connect's RecordIsTombstone predicate: true when
// the value is null.
type recordIsTombstone struct{}

func newRecordIsTombstone(settings map[string]string) (Predicate, error) {
	if err := newConf("RecordIsTombstone", settings).done(); err != nil {
		return nil, err
	}
	return recordIsTombstone{}, nil
}

func (recordIsTombstone) Test(r *record.Record) bool { return r.Value.IsNull() }
