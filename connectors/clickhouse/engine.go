package clickhouse

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// ErrEngine is wrapped by every error about auto.create.engine.
var ErrEngine = errors.New("auto.create.engine")

// engineColumns are the MergeTree engines auto.create.engine may name,
// with how many column arguments each takes (min, max). Each may also be
// Replicated*, with either no arguments at all (the server's default
// path) or a ZooKeeper path and a replica name first.
var engineColumns = map[string][2]int{
	"MergeTree":                    {0, 0},
	"ReplacingMergeTree":           {0, 2}, // version, is_deleted
	"SummingMergeTree":             {0, 0},
	"AggregatingMergeTree":         {0, 0},
	"CollapsingMergeTree":          {1, 1}, // sign
	"VersionedCollapsingMergeTree": {2, 2}, // sign, version
}

var (
	bareIdentRE   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	zkLiteralRE   = regexp.MustCompile(`^[A-Za-z0-9_./{}-]+$`)
	engineNameRE  = regexp.MustCompile(`^[A-Za-z]+`)
	quotedIdentRE = regexp.MustCompile("^(`[^`\\\\\x00]+`|\"[^\"\\\\\x00]+\")")
	literalRE     = regexp.MustCompile(`^'[^'\\\x00]*'`)
)

// engineArg is one parsed argument: an identifier or a string literal.
type engineArg struct {
	text    string
	literal bool
}

// ParseEngine validates auto.create.engine and returns it rebuilt from
// its parts: an engine of engineColumns (or its Replicated* form), column
// arguments as quoted identifiers, ZooKeeper path and replica name as
// single-quoted literals of path characters ([A-Za-z0-9_./{}-]). Nothing
// else is accepted: no SETTINGS, no AS SELECT, no table functions, no
// comments. "" stays "" (txsink chooses the engine).
func ParseEngine(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", nil
	}
	name := engineNameRE.FindString(s)
	base, replicated := strings.CutPrefix(name, "Replicated")
	cols, ok := engineColumns[base]
	if !ok {
		return "", fmt.Errorf("%w: engine %q is not allowed (allowed: %s, and their Replicated* forms)", ErrEngine, name, strings.Join(slices.Sorted(maps.Keys(engineColumns)), ", "))
	}
	rest := strings.TrimSpace(s[len(name):])
	var args []engineArg
	if rest != "" {
		var err error
		if args, err = parseEngineArgs(rest); err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrEngine, name, err)
		}
	}
	var out []string
	if replicated && len(args) > 0 {
		if len(args) < 2 || !args[0].literal || !args[1].literal {
			return "", fmt.Errorf("%w: %s takes no arguments, or a ZooKeeper path and a replica name ('…') first", ErrEngine, name)
		}
		for _, a := range args[:2] {
			if !zkLiteralRE.MatchString(a.text) {
				return "", fmt.Errorf("%w: %s: %q: a ZooKeeper path or replica name may hold only letters, digits and _ . / { } -", ErrEngine, name, a.text)
			}
			out = append(out, "'"+a.text+"'")
		}
		args = args[2:]
	}
	if len(args) < cols[0] || len(args) > cols[1] {
		return "", fmt.Errorf("%w: %s takes %d to %d column arguments, got %d", ErrEngine, name, cols[0], cols[1], len(args))
	}
	for _, a := range args {
		if a.literal {
			return "", fmt.Errorf("%w: %s: %q: want a column name", ErrEngine, name, a.text)
		}
		out = append(out, quoteIdent(a.text))
	}
	return name + "(" + strings.Join(out, ", ") + ")", nil
}

// parseEngineArgs reads "(arg, arg, …)" and nothing after it.
func parseEngineArgs(s string) ([]engineArg, error) {
	if s[0] != '(' {
		return nil, errors.New("want (arguments) after the engine name and nothing else")
	}
	s = strings.TrimSpace(s[1:])
	var args []engineArg
	if strings.HasPrefix(s, ")") {
		s = s[1:]
	} else {
		for {
			var a engineArg
			switch {
			case literalRE.MatchString(s):
				m := literalRE.FindString(s)
				a = engineArg{text: m[1 : len(m)-1], literal: true}
				s = s[len(m):]
			case quotedIdentRE.MatchString(s):
				m := quotedIdentRE.FindString(s)
				a = engineArg{text: m[1 : len(m)-1]}
				s = s[len(m):]
			default:
				end := strings.IndexAny(s, ",) \t\r\n")
				if end < 0 {
					end = len(s)
				}
				if !bareIdentRE.MatchString(s[:end]) {
					return nil, fmt.Errorf("argument %q: want a column name or a '…' literal", s[:end])
				}
				a = engineArg{text: s[:end]}
				s = s[end:]
			}
			args = append(args, a)
			s = strings.TrimSpace(s)
			if strings.HasPrefix(s, ",") {
				s = strings.TrimSpace(s[1:])
				continue
			}
			if strings.HasPrefix(s, ")") {
				s = s[1:]
				break
			}
			return nil, errors.New("want ',' or ')' between arguments")
		}
	}
	if strings.TrimSpace(s) != "" {
		return nil, errors.New("nothing may follow the engine's arguments (txsink adds ORDER BY; SETTINGS, AS SELECT and the like are refused)")
	}
	return args, nil
}
