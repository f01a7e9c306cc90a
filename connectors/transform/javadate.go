package transform

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// javaDateFormat is a java.text.SimpleDateFormat pattern as Kafka
// Connect's TimestampConverter uses it: in UTC, with an English locale,
// lenient, at millisecond precision. It formats and parses the pattern
// letters below and refuses the others when the transform is configured.
//
//	y     year (yy: two digits when formatting)   M, L  month (MMM Jan, MMMM January)
//	d     day of month                            E     day of week (EEE Mon, EEEE Monday)
//	H     hour 0-23    k  hour 1-24               K     hour 0-11   h  hour 1-12
//	m     minute       s  second                  S     millisecond (a count, not a fraction)
//	a     AM/PM        z  UTC, GMT±hh:mm          Z     +0000, ±hhmm   X  Z, ±hh, ±hhmm, ±hh:mm
//	'…'   literal text ('' is a quote)            other non-letters are literal
//
// Parsing follows SimpleDateFormat.parse(String): leading spaces before a
// field are skipped, a numeric field followed directly by another field
// takes at most its width in digits, out-of-range values roll over
// (month 13 is January of the next year), and text after the pattern is
// ignored. Two differences, both refusals: a two-digit year read with y or
// yy, which Java resolves relative to the current date (not deterministic),
// and zone names other than UTC and GMT, are errors.
type javaDateFormat struct {
	pattern string
	toks    []dateTok
}

type dateTok struct {
	letter byte // 0: literal
	count  int
	lit    string
}

// Pattern letters SimpleDateFormat has and txsink does not.
var unsupportedDateLetters = map[byte]string{
	'G': "era", 'Y': "week year", 'w': "week in year", 'W': "week in month",
	'D': "day in year", 'F': "day of week in month", 'u': "day number of week",
}

func parseJavaDateFormat(p string) (*javaDateFormat, error) {
	f := &javaDateFormat{pattern: p}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			f.toks = append(f.toks, dateTok{lit: lit.String()})
			lit.Reset()
		}
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '\'':
			if i+1 < len(p) && p[i+1] == '\'' {
				lit.WriteByte('\'')
				i++
				continue
			}
			// Quoted text up to the closing quote; '' inside is a quote.
			i++
			for {
				if i >= len(p) {
					return nil, fmt.Errorf("unterminated quote in pattern %q", p)
				}
				if p[i] == '\'' {
					if i+1 < len(p) && p[i+1] == '\'' {
						lit.WriteByte('\'')
						i += 2
						continue
					}
					break
				}
				lit.WriteByte(p[i])
				i++
			}
		case c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
			if what, ok := unsupportedDateLetters[c]; ok {
				return nil, fmt.Errorf("pattern letter %q (%s) is not supported by txsink; supported: y M L d E H k K h m s S a z Z X", c, what)
			}
			if !strings.ContainsRune("yMLdEHkKhmsSazZX", rune(c)) {
				return nil, fmt.Errorf("illegal pattern character %q in %q", c, p)
			}
			n := 1
			for i+1 < len(p) && p[i+1] == c {
				n++
				i++
			}
			if c == 'X' && n > 3 {
				return nil, fmt.Errorf("invalid ISO 8601 zone pattern: %d X letters (at most 3)", n)
			}
			flush()
			f.toks = append(f.toks, dateTok{letter: c, count: n})
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return f, nil
}

// numeric reports whether the token is a field written with digits.
func (t dateTok) numeric() bool {
	switch t.letter {
	case 'M', 'L':
		return t.count <= 2
	case 'y', 'd', 'H', 'k', 'K', 'h', 'm', 's', 'S':
		return true
	}
	return false
}

var (
	longMonths  = [...]string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
	shortMonths = [...]string{"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"}
	longDays    = [...]string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	shortDays   = [...]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	ampm        = [...]string{"AM", "PM"}
)

// format renders the instant ms (epoch milliseconds) in UTC.
func (f *javaDateFormat) format(ms int64) string {
	t := time.UnixMilli(ms).UTC()
	b := make([]byte, 0, len(f.pattern)+8)
	num := func(v, width int) {
		s := strconv.Itoa(v)
		for i := len(s); i < width; i++ {
			b = append(b, '0')
		}
		b = append(b, s...)
	}
	for _, tk := range f.toks {
		h := t.Hour()
		switch tk.letter {
		case 0:
			b = append(b, tk.lit...)
		case 'y':
			if tk.count == 2 {
				num(t.Year()%100, 2)
			} else {
				num(t.Year(), tk.count)
			}
		case 'M', 'L':
			switch {
			case tk.count >= 4:
				b = append(b, longMonths[t.Month()-1]...)
			case tk.count == 3:
				b = append(b, shortMonths[t.Month()-1]...)
			default:
				num(int(t.Month()), tk.count)
			}
		case 'd':
			num(t.Day(), tk.count)
		case 'E':
			if tk.count >= 4 {
				b = append(b, longDays[t.Weekday()]...)
			} else {
				b = append(b, shortDays[t.Weekday()]...)
			}
		case 'H':
			num(h, tk.count)
		case 'k':
			if h == 0 {
				h = 24
			}
			num(h, tk.count)
		case 'K':
			num(h%12, tk.count)
		case 'h':
			if h%12 == 0 {
				num(12, tk.count)
			} else {
				num(h%12, tk.count)
			}
		case 'm':
			num(t.Minute(), tk.count)
		case 's':
			num(t.Second(), tk.count)
		case 'S':
			num(t.Nanosecond()/1e6, tk.count)
		case 'a':
			b = append(b, ampm[h/12]...)
		case 'z':
			if tk.count >= 4 {
				b = append(b, "Coordinated Universal Time"...)
			} else {
				b = append(b, "UTC"...)
			}
		case 'Z':
			b = append(b, "+0000"...)
		case 'X':
			b = append(b, 'Z')
		}
	}
	return string(b)
}

// dateFields are the calendar fields a parse sets.
type dateFields struct {
	year, month, day        int
	hour24, hour12, minute  int
	second, milli           int
	has24, has12, pm, hasPM bool
	offsetMin               int
}

// parse reads text with the pattern and returns epoch milliseconds.
func (f *javaDateFormat) parse(text string) (int64, error) {
	d := dateFields{year: 1970, month: 1, day: 1}
	pos := 0
	fail := func(why string) (int64, error) {
		return 0, fmt.Errorf("value %q does not match pattern %q: %s", text, f.pattern, why)
	}
	for i, tk := range f.toks {
		if tk.letter == 0 {
			if !strings.HasPrefix(text[pos:], tk.lit) {
				return fail(fmt.Sprintf("want %q at position %d", tk.lit, pos))
			}
			pos += len(tk.lit)
			continue
		}
		for pos < len(text) && (text[pos] == ' ' || text[pos] == '\t') {
			pos++
		}
		if pos >= len(text) {
			return fail("the text ends early")
		}
		// A numeric field directly followed by another numeric field
		// reads at most its width (SimpleDateFormat's obeyCount).
		obey := i+1 < len(f.toks) && f.toks[i+1].numeric()
		number := func() (int, int, bool) {
			limit := len(text)
			if obey {
				if pos+tk.count > len(text) {
					return 0, 0, false
				}
				limit = pos + tk.count
			}
			end := pos
			for end < limit && end-pos < 9 && text[end] >= '0' && text[end] <= '9' {
				end++
			}
			if end == pos {
				return 0, 0, false
			}
			n, _ := strconv.Atoi(text[pos:end])
			digits := end - pos
			pos = end
			return n, digits, true
		}
		var n int
		var ok bool
		switch tk.letter {
		case 'M', 'L':
			if tk.count >= 3 {
				var m int
				if m, ok = matchName(text, &pos, longMonths[:], shortMonths[:]); !ok {
					return fail(fmt.Sprintf("want a month name at position %d", pos))
				}
				d.month = m + 1
				continue
			}
			if n, _, ok = number(); ok {
				d.month = n
			}
		case 'E':
			if _, ok = matchName(text, &pos, longDays[:], shortDays[:]); !ok {
				return fail(fmt.Sprintf("want a day name at position %d", pos))
			}
			continue
		case 'a':
			var p int
			if p, ok = matchName(text, &pos, ampm[:]); !ok {
				return fail(fmt.Sprintf("want AM or PM at position %d", pos))
			}
			d.hasPM, d.pm = true, p == 1
			continue
		case 'z', 'Z', 'X':
			off, err := parseZone(text, &pos, tk.letter)
			if err != nil {
				return fail(err.Error())
			}
			d.offsetMin = off
			continue
		case 'y':
			var digits int
			if n, digits, ok = number(); ok {
				if tk.count <= 2 && digits == 2 {
					return fail("a two-digit year is resolved by SimpleDateFormat relative to the current date, which is not deterministic; use yyyy")
				}
				d.year = n
			}
		default:
			if n, _, ok = number(); ok {
				switch tk.letter {
				case 'd':
					d.day = n
				case 'H':
					d.hour24, d.has24 = n, true
				case 'k':
					if n == 24 {
						n = 0
					}
					d.hour24, d.has24 = n, true
				case 'K':
					d.hour12, d.has12 = n, true
				case 'h':
					if n == 12 {
						n = 0
					}
					d.hour12, d.has12 = n, true
				case 'm':
					d.minute = n
				case 's':
					d.second = n
				case 'S':
					d.milli = n
				}
			}
		}
		if !ok {
			return fail(fmt.Sprintf("want digits at position %d", pos))
		}
	}
	hour := d.hour24
	if !d.has24 && d.has12 {
		hour = d.hour12
		if d.pm {
			hour += 12
		}
	} else if !d.has24 && d.pm {
		hour = 12
	}
	t := time.Date(d.year, time.Month(d.month), d.day, hour, d.minute, d.second, 0, time.UTC)
	return t.UnixMilli() + int64(d.milli) - int64(d.offsetMin)*60_000, nil
}

// matchName matches the longest of the names (case-insensitively) at
// *pos and returns its index in its list.
func matchName(text string, pos *int, lists ...[]string) (int, bool) {
	best, bestLen := -1, 0
	for _, names := range lists {
		for i, n := range names {
			if len(n) > bestLen && len(text)-*pos >= len(n) && strings.EqualFold(text[*pos:*pos+len(n)], n) {
				best, bestLen = i, len(n)
			}
		}
	}
	if best < 0 {
		return 0, false
	}
	*pos += bestLen
	return best, true
}

// parseZone reads a zone at *pos and returns its offset east of UTC in
// minutes: "Z" (X only), "UTC" or "GMT" optionally followed by an offset,
// or an offset ±hh, ±hhmm, ±hh:mm.
func parseZone(text string, pos *int, letter byte) (int, error) {
	rest := text[*pos:]
	if letter == 'X' && strings.HasPrefix(rest, "Z") {
		*pos++
		return 0, nil
	}
	for _, name := range []string{"Coordinated Universal Time", "Greenwich Mean Time", "UTC", "GMT"} {
		if len(rest) >= len(name) && strings.EqualFold(rest[:len(name)], name) {
			*pos += len(name)
			if off, n, ok := zoneOffset(text[*pos:]); ok {
				*pos += n
				return off, nil
			}
			return 0, nil
		}
	}
	if off, n, ok := zoneOffset(rest); ok {
		*pos += n
		return off, nil
	}
	end := *pos
	for end < len(text) && (text[end] >= 'A' && text[end] <= 'Z' || text[end] >= 'a' && text[end] <= 'z' || text[end] == '/' || text[end] == '_') {
		end++
	}
	if end > *pos {
		return 0, fmt.Errorf("time zone %q is not supported (only UTC, GMT and numeric offsets are)", text[*pos:end])
	}
	return 0, fmt.Errorf("want a time zone at position %d", *pos)
}

// zoneOffset reads ±hh, ±h, ±hhmm or ±hh:mm.
func zoneOffset(s string) (minutes, n int, ok bool) {
	if len(s) < 2 || s[0] != '+' && s[0] != '-' {
		return 0, 0, false
	}
	digits := func(from, max int) (int, int) {
		v, i := 0, from
		for i < len(s) && i-from < max && s[i] >= '0' && s[i] <= '9' {
			v = v*10 + int(s[i]-'0')
			i++
		}
		return v, i - from
	}
	h, hn := digits(1, 2)
	if hn == 0 {
		return 0, 0, false
	}
	i := 1 + hn
	m := 0
	if hn == 2 {
		if i < len(s) && s[i] == ':' {
			if mm, mn := digits(i+1, 2); mn == 2 {
				m, i = mm, i+3
			}
		} else if mm, mn := digits(i, 2); mn == 2 {
			m, i = mm, i+2
		}
	}
	if h > 23 || m > 59 {
		return 0, 0, false
	}
	off := h*60 + m
	if s[0] == '-' {
		off = -off
	}
	return off, i, true
}
