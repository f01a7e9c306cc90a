package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/txsink/txsink/config"
	"github.com/txsink/txsink/connectors/convert"
	"github.com/txsink/txsink/connectors/transform"
)

// configDocsCommand regenerates the checked-in reference; the stale-file
// test prints it.
const configDocsCommand = "go run ./cmd/txsink config-docs > docs/configuration.md"

// cmdConfigDocs prints the configuration reference (Markdown) generated
// from the definitions the code validates with: config.WorkerDefs,
// config.ConnectorDefs, convert.Defs and each registered sink's Spec.Defs. Hidden
// (test-only) settings are left out.
func cmdConfigDocs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("config-docs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "txsink config-docs: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	w := bufio.NewWriter(stdout)
	writeConfigDocs(w)
	if err := w.Flush(); err != nil {
		fmt.Fprintln(stderr, "txsink config-docs:", err)
		return 1
	}
	return exitOK
}

// writeConfigDocs writes the reference. Its output depends only on the
// definitions, never on the environment, so the checked-in file can be
// compared with it.
func writeConfigDocs(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	p("# Configuration reference\n\n")
	p("<!-- Generated from the code's setting definitions by\n     %s\n     Do not edit by hand: change the definitions (config/*.go, connectors/*/spec.go) and regenerate.\n     A test (cmd/txsink/configdocs_test.go) fails when this file is stale. -->\n\n", configDocsCommand)
	p("txsink has two kinds of settings:\n\n")
	p("- **Worker settings** configure the `txsink serve` process: where Kafka is, the REST listener and its\n")
	p("  security, the state directory, logging. Each is read, in increasing precedence, from its default, a\n")
	p("  worker file (a JSON object or Java properties), its environment variable, and the command line.\n")
	p("- **Connector settings** are the `config` object of a connector (`POST /connectors`, `txsink connectors\n")
	p("  create`, `txsink run -config`, `txsink serve -connector`): the settings every connector has, then its\n")
	p("  sink's own. `GET /connector-plugins/{type}/config` returns the same definitions over REST, and\n")
	p("  `PUT /connector-plugins/{type}/config/validate` checks a configuration against them.\n\n")
	p("Types are Kafka Connect's: `STRING`, `INT`, `LONG`, `BOOLEAN` (`true`/`false`), `LIST` (comma-separated)\n")
	p("and `PASSWORD` (a string that the API, the logs and the metrics never show).\n\n")

	p("## Worker settings\n\n")
	p("The environment variable of a setting is `TXSINK_` followed by its name in upper case with `.` and `-`\n")
	p("replaced by `_`.\n\n")
	writeDefs(w, config.WorkerDefs, true)

	p("## Connector settings common to every sink\n\n")
	writeDefs(w, config.ConnectorDefs, false)

	p("## Converters\n\n")
	p("Every connector has these settings, with Kafka Connect's names; see [formats.md](formats.md) for the formats and\n")
	p("their type mapping. The settings under `key.converter.` and `value.converter.` are passed to the converter with\n")
	p("the prefix removed.\n\n")
	writeDefs(w, convert.Defs, false)

	p("## Transforms\n\n")
	p("Kafka Connect's single message transforms and predicates, by class name; see [transforms.md](transforms.md).\n\n")
	writeDefs(w, transform.Defs, false)

	p("## Change data capture\n\n")
	p("How Debezium change events are applied; see [cdc.md](cdc.md) and [schema-evolution.md](schema-evolution.md).\n\n")
	writeDefs(w, convert.CDCDefs, false)

	for _, s := range registry().Specs() {
		p("## Sink `%s`\n\n", s.Name)
		p("`connector.class`: `%s` or `%s` (plugin version %s). These settings come after the common ones.\n\n", s.Name, s.Class, s.Version)
		writeDefs(w, s.Defs, false)
	}
}

// writeDefs writes one table per group, groups in order of first
// appearance, hidden settings left out.
func writeDefs(w io.Writer, defs config.Defs, withEnv bool) {
	var groups []string
	byGroup := map[string]config.Defs{}
	for _, d := range defs {
		if d.Hidden {
			continue
		}
		g := d.Group
		if g == "" {
			g = "Other"
		}
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], d)
	}
	for _, g := range groups {
		fmt.Fprintf(w, "### %s\n\n", g)
		if withEnv {
			fmt.Fprint(w, "| setting | environment | type | default | description |\n|---|---|---|---|---|\n")
		} else {
			fmt.Fprint(w, "| setting | type | default | description |\n|---|---|---|---|\n")
		}
		for _, d := range byGroup[g] {
			env := ""
			if withEnv {
				env = " `" + config.EnvKey(d.Name) + "` |"
			}
			fmt.Fprintf(w, "| `%s` |%s %s | %s | %s |\n", d.Name, env, d.Type, defaultCell(d), textCell(describe(d)))
		}
		fmt.Fprintln(w)
	}
}

func defaultCell(d config.Def) string {
	switch {
	case d.Required:
		return "required"
	case d.Default == "":
		return "—"
	case d.Type == config.Int || d.Type == config.Long:
		return "`" + d.Default + "`"
	default:
		return "`" + cell(d.Default) + "`"
	}
}

// describe is a definition's documentation followed by its constraints.
func describe(d config.Def) string {
	s := strings.TrimSpace(d.Doc)
	if len(d.Enum) > 0 {
		vals := make([]string, len(d.Enum))
		for i, e := range d.Enum {
			vals[i] = "`" + e + "`"
		}
		s += " Allowed values: " + strings.Join(vals, ", ") + "."
	}
	if (d.Type == config.Int || d.Type == config.Long) && d.Max > d.Min {
		s += " Range: " + strconv.FormatInt(d.Min, 10) + " to " + strconv.FormatInt(d.Max, 10) + "."
	}
	return s
}

// textCell makes prose safe inside a Markdown table cell: also escapes
// angle brackets, which Markdown would take for HTML tags.
func textCell(s string) string {
	return strings.NewReplacer("<", `\<`, ">", `\>`).Replace(cell(s))
}

// cell makes text safe inside a Markdown table cell (also inside a code
// span there, where GitHub's tables still need "|" escaped).
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.Join(strings.Fields(s), " ")
}
