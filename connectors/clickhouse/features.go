package clickhouse

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// Version is a ClickHouse server version.
type Version struct{ Major, Minor, Patch int }

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// AtLeast reports whether v >= major.minor.
func (v Version) AtLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

// parseVersion parses version()'s text: "18.16.1", "24.8.4.13", "25.3.2.39-lts".
func parseVersion(s string) (Version, error) {
	f := strings.FieldsFunc(strings.TrimSpace(s), func(r rune) bool { return r == '.' || r == '-' })
	if len(f) < 2 {
		return Version{}, fmt.Errorf("unrecognised ClickHouse version %q", s)
	}
	var n [3]int
	for i := 0; i < 3 && i < len(f); i++ {
		v, err := strconv.Atoi(f[i])
		if err != nil {
			if i < 2 {
				return Version{}, fmt.Errorf("unrecognised ClickHouse version %q", s)
			}
			break
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// Features are what the server offers for exactly-once inserts, detected
// from version(), system.settings and system.merge_tree_settings.
type Features struct {
	Version Version
	// DedupToken: the insert_deduplication_token setting exists (22.2+).
	DedupToken bool
	// InsertDeduplicate: the insert_deduplicate setting exists (it is
	// switched on for every insert of the sink).
	InsertDeduplicate bool
	// DeduplicateInsert: the deduplicate_insert setting exists (26.x). It
	// supersedes insert_deduplicate, which then only counts when it is
	// backward_compatible_choice; the sink sets it to enable.
	DeduplicateInsert bool
	// NonReplicatedWindow is the server's default
	// non_replicated_deduplication_window (0: plain MergeTree tables do not
	// de-duplicate unless the table sets it; -1: the setting does not exist).
	NonReplicatedWindow int64
	// ReplicatedWindow is the server's default replicated_deduplication_window.
	ReplicatedWindow int64
	// Transactions: the server has experimental transactions enabled. The
	// sink does not use them (see docs/clickhouse.md); status reports it.
	Transactions bool
	// IsDeleted: ReplacingMergeTree accepts an is_deleted column (23.2+).
	IsDeleted bool
	// ZooKeeper: system.zookeeper answers (replicated tables can exist and
	// their de-duplication window can be inspected).
	ZooKeeper bool
	// Macros holds system.macros ({shard}, {replica}), used by auto.create.
	Macros map[string]string
}

// Mechanism is how Commit makes a redo harmless.
type Mechanism string

// Mechanisms.
const (
	// MechToken: insert_deduplication_token per block.
	MechToken Mechanism = "token"
	// MechBlocks: byte-identical blocks into a Replicated*MergeTree table.
	MechBlocks Mechanism = "replicated-blocks"
	// MechNone: no de-duplication (refused for exactly_once).
	MechNone Mechanism = "none"
)

// querier is the part of a clickhouse-go connection feature detection uses.
type querier interface {
	QueryRow(ctx context.Context, query string, args ...any) driver.Row
	Query(ctx context.Context, query string, args ...any) (driver.Rows, error)
}

// detectFeatures reads the server's version and settings.
func detectFeatures(ctx context.Context, q querier) (Features, error) {
	var f Features
	var vs string
	if err := q.QueryRow(ctx, "SELECT version()").Scan(&vs); err != nil {
		return f, fmt.Errorf("clickhouse: SELECT version(): %w", err)
	}
	v, err := parseVersion(vs)
	if err != nil {
		return f, err
	}
	f.Version = v
	settings, err := nameValues(ctx, q, "SELECT name, value FROM system.settings WHERE name IN ('insert_deduplication_token', 'insert_deduplicate', 'deduplicate_insert', 'implicit_transaction', 'throw_on_unsupported_query_inside_transaction')")
	if err != nil {
		return f, err
	}
	mt, err := nameValues(ctx, q, "SELECT name, value FROM system.merge_tree_settings WHERE name IN ('non_replicated_deduplication_window', 'replicated_deduplication_window')")
	if err != nil {
		return f, err
	}
	f.applySettings(settings, mt)
	// Experimental transactions are a server setting (23.x+), visible in
	// system.server_settings where that table exists.
	if v.AtLeast(23, 3) {
		if ss, err := nameValues(ctx, q, "SELECT name, value FROM system.server_settings WHERE name = 'allow_experimental_transactions'"); err == nil {
			f.Transactions = ss["allow_experimental_transactions"] == "1" || ss["allow_experimental_transactions"] == "true"
		}
	}
	f.IsDeleted = v.AtLeast(23, 2)
	if macros, err := nameValues(ctx, q, "SELECT toString(macro), substitution FROM system.macros"); err == nil {
		f.Macros = macros
	}
	var n uint64
	if err := q.QueryRow(ctx, "SELECT count() FROM system.zookeeper WHERE path = '/'").Scan(&n); err == nil {
		f.ZooKeeper = true
	}
	return f, nil
}

// applySettings fills the fields that come from system.settings and
// system.merge_tree_settings (name → value).
func (f *Features) applySettings(settings, mergeTree map[string]string) {
	_, f.DedupToken = settings["insert_deduplication_token"]
	_, f.InsertDeduplicate = settings["insert_deduplicate"]
	_, f.DeduplicateInsert = settings["deduplicate_insert"]
	f.NonReplicatedWindow = -1
	if w, ok := mergeTree["non_replicated_deduplication_window"]; ok {
		f.NonReplicatedWindow, _ = strconv.ParseInt(w, 10, 64)
	}
	f.ReplicatedWindow, _ = strconv.ParseInt(mergeTree["replicated_deduplication_window"], 10, 64)
}

func nameValues(ctx context.Context, q querier, sql string) (map[string]string, error) {
	rows, err := q.Query(ctx, sql)
	if err != nil {
		return nil, fmt.Errorf("clickhouse: %s: %w", sql, err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// Engine describes a table's engine as far as de-duplication goes.
type Engine struct {
	Name string // MergeTree, ReplicatedReplacingMergeTree, …
	Full string // engine_full
	// Replicated: a Replicated*MergeTree table (de-duplicates identical
	// blocks, with or without tokens).
	Replicated bool
	// MergeTreeFamily: any *MergeTree engine.
	MergeTreeFamily bool
	// Window is the table's de-duplication window in blocks: its own
	// SETTINGS value or the server default (replicated or non-replicated).
	Window int64
	// Replacing: a ReplacingMergeTree (rows with equal sorting keys collapse).
	Replacing bool
	// ZooKeeperPath of a replicated table, from system.replicas.
	ZooKeeperPath string
}

var settingRE = regexp.MustCompile(`(?i)\b(replicated_deduplication_window|non_replicated_deduplication_window)\s*=\s*(\d+)`)

// parseEngine interprets engine and engine_full from system.tables with the
// server's defaults.
func parseEngine(name, full string, f Features) Engine {
	e := Engine{Name: name, Full: full}
	e.MergeTreeFamily = strings.HasSuffix(name, "MergeTree")
	e.Replicated = strings.HasPrefix(name, "Replicated") && e.MergeTreeFamily
	e.Replacing = strings.Contains(name, "ReplacingMergeTree")
	if !e.MergeTreeFamily {
		return e
	}
	if e.Replicated {
		e.Window = f.ReplicatedWindow
	} else {
		e.Window = max(f.NonReplicatedWindow, 0)
	}
	for _, m := range settingRE.FindAllStringSubmatch(full, -1) {
		n, _ := strconv.ParseInt(m[2], 10, 64)
		if strings.EqualFold(m[1], "replicated_deduplication_window") == e.Replicated {
			e.Window = n
		}
	}
	return e
}

// mechanism chooses how inserts into a table with engine e are
// de-duplicated on a server with features f, and explains a refusal.
func (f Features) mechanism(e Engine) (Mechanism, string) {
	switch {
	case !e.MergeTreeFamily:
		return MechNone, fmt.Sprintf("engine %s does not de-duplicate inserts: use a Replicated*MergeTree table", e.Name)
	case e.Replicated && e.Window <= 0:
		return MechNone, fmt.Sprintf("engine %s has replicated_deduplication_window = 0: set it above 0 (ALTER TABLE … MODIFY SETTING replicated_deduplication_window = 1000, or recreate the table)", e.Name)
	case f.DedupToken && e.Window > 0:
		return MechToken, ""
	case e.Replicated && f.InsertDeduplicate:
		return MechBlocks, ""
	case f.DedupToken:
		return MechNone, fmt.Sprintf("engine %s has non_replicated_deduplication_window = 0: set it (for example SETTINGS non_replicated_deduplication_window = 1000) or use a Replicated*MergeTree table", e.Name)
	}
	return MechNone, fmt.Sprintf("ClickHouse %s has no insert_deduplication_token and engine %s does not de-duplicate blocks: recreate the table as Replicated%s (needs ZooKeeper or ClickHouse Keeper), or upgrade ClickHouse to 22.2 or later and set non_replicated_deduplication_window", f.Version, e.Name, e.Name)
}
