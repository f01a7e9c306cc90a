package main

// What "txsink connectors status" says about a FAILED task: the line of
// its trace that gives the cause, the setting to fix when the cause names
// one, and what to do next with this CLI.
//
// The CLI sees the trace as text (the REST API's "trace"), so it reads
// the SQLSTATE the PostgreSQL sink leaves in it and txsink's own wording;
// whatever it does not recognise it shows as it is, without a hint.

import (
	"fmt"
	"regexp"
	"strings"
)

// traceAdvice is what the CLI prints under a failed task.
type traceAdvice struct {
	Cause   string // the trace's cause line
	Setting string // the setting to fix, when the cause names one
	Hint    string // what to do, with CLI commands ("" when nothing fits)
}

var (
	sqlStateRE = regexp.MustCompile(`\(SQLSTATE ([0-9A-Z]{5})\)`)
	skipRE     = regexp.MustCompile(`\s*\(skip it by resetting the partition's offset to (\d+)\)`)
	badAtRE    = regexp.MustCompile(`topic (\S+) partition (\d+) offset (\d+)`)
)

// traceCause returns the line of a trace that says why it failed. A
// multi-line trace (PostgreSQL's client puts each address it tried on a
// line of its own, the TLS attempt of sslmode=prefer first) is read for
// the line with a SQLSTATE, else its last line; a one-line trace is
// returned whole.
func traceCause(trace string) string {
	var lines []string
	for _, l := range strings.Split(trace, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "at ") {
			lines = append(lines, l)
		}
	}
	switch len(lines) {
	case 0:
		return ""
	case 1:
		return lines[0]
	}
	for _, l := range lines {
		if sqlStateRE.MatchString(l) {
			return l
		}
	}
	return lines[len(lines)-1]
}

// sqlStateSetting maps SQLSTATEs of a failed connection to the setting to
// fix.
var sqlStateSetting = map[string]string{
	"28P01": "connection.password", // invalid_password
	"28000": "connection.user",     // invalid_authorization_specification: no such role, or pg_hba.conf refuses it
	"3D000": "connection.url",      // invalid_catalog_name: the URL's database does not exist
	"3F000": "table.schema",        // invalid_schema_name
}

// perRecordSQLState reports SQLSTATEs that one record causes and the next
// record most likely does not (a value too long, a duplicate key); a
// NOT NULL violation, a datatype mismatch or a schema error hits every
// record alike.
func perRecordSQLState(code string) bool {
	switch code {
	case "22001", "22003", "22007", "22008", "22021", "22P05", "23503", "23505", "23514", "23P01", "54000":
		return true
	}
	return false
}

// failsAlike says why the next records will most likely fail as the bad
// one did, or returns "" when the fault may be this record's alone: a
// SQLSTATE that is not one record's (a NOT NULL violation, a datatype
// mismatch), or a column of the table that no record can fill.
func failsAlike(cause, code string) string {
	switch {
	case strings.Contains(cause, "no value for NOT NULL column"):
		return "the table has a NOT NULL column without a default that the records do not set"
	case code != "" && !perRecordSQLState(code):
		return "SQLSTATE " + code
	}
	return ""
}

// adviseTrace returns what to print under a failed task of connector name.
func adviseTrace(name, trace string) traceAdvice {
	a := traceAdvice{Cause: traceCause(trace)}
	if a.Cause == "" {
		return a
	}
	code := ""
	if m := sqlStateRE.FindAllStringSubmatch(trace, -1); len(m) > 0 {
		code = m[len(m)-1][1]
	}
	restart := fmt.Sprintf("txsink connectors restart %s -include-tasks", name)
	if skip := skipRE.FindStringSubmatch(a.Cause); skip != nil {
		// Stopped at a bad record: skipping helps only when the next
		// record is not bad the same way.
		where := badAtRE.FindStringSubmatch(a.Cause)
		if why := failsAlike(a.Cause, code); why != "" {
			a.Cause = skipRE.ReplaceAllString(a.Cause, "")
			if s := sqlStateSetting[code]; s != "" {
				a.Setting = s
			}
			a.Hint = fmt.Sprintf("every record will most likely fail the same way (%s): fix the table or the connector's settings, then %s; skipping the record would only stop at the next one", why, restart)
			return a
		}
		if where != nil {
			a.Hint = fmt.Sprintf("to skip this record: txsink connectors stop %s; txsink connectors offsets %s -set FILE "+
				`with {"offsets":[{"partition":{"kafka_topic":%q,"kafka_partition":%s},"offset":{"kafka_offset":%s}}]}; txsink connectors resume %s. `+
				"To keep going past bad records, set errors.tolerance=all (with errors.deadletterqueue.topic.name to keep them)",
				name, name, where[1], where[2], skip[1], name)
		}
		return a
	}
	switch {
	case code != "" && sqlStateSetting[code] != "":
		a.Setting = sqlStateSetting[code]
		a.Hint = fmt.Sprintf("fix %s, then %s (txsink connectors create -update -f FILE replaces the configuration and restarts the tasks)", a.Setting, restart)
	case strings.Contains(trace, "table not found"):
		a.Setting = "auto.create"
		a.Hint = fmt.Sprintf("create the table or set auto.create=true, then %s", restart)
	case strings.Contains(trace, "connect to PostgreSQL") && (strings.Contains(trace, "connection refused") || strings.Contains(trace, "no such host") || strings.Contains(trace, "i/o timeout")):
		a.Setting = "connection.url"
		a.Hint = fmt.Sprintf("check the host and port of connection.url and that the server runs; the task retries by itself, or %s", restart)
	case strings.Contains(trace, "task stopped at a bad record"):
		// handled above when the trace names the offset
	default:
		a.Hint = fmt.Sprintf("once the cause is fixed: %s", restart)
	}
	return a
}
