package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/txsink/txsink/internal/pgcatalog"
)

// colKind is how the writer converts JSON into a column's type.
type colKind int

const (
	kindUnsupported colKind = iota
	kindText                // text, varchar, bpchar, name, citext, … (type category S)
	kindInt2
	kindInt4
	kindInt8
	kindNumeric
	kindFloat4
	kindFloat8
	kindBool
	kindTimestamptz
	kindTimestamp
	kindDate
	kindTime
	kindUUID
	kindJSON
	kindJSONB
	kindBytea
	kindEnum  // labels, sent as text
	kindOther // a type pgx knows (inet, interval, …): JSON string in the type's text syntax, parsed client-side
	kindArray
)

var kindNames = [...]string{"unsupported", "text", "int2", "int4", "int8", "numeric", "float4", "float8", "bool",
	"timestamptz", "timestamp", "date", "time", "uuid", "json", "jsonb", "bytea", "enum", "other", "array"}

func (k colKind) String() string { return kindNames[k] }

// pgType is a column's type (or an array's element type) as the catalog
// describes it.
type pgType struct {
	OID  uint32 // the column's own type (a domain stays a domain here)
	Name string // schema-qualified, quoted name without typmod, usable in casts: "pg_catalog"."int8"
	Kind colKind
	Elem *pgType // element type when Kind == kindArray
	// Domain: OID is a domain's, which the server describes the column
	// with its base type's (so copyOps does not encode it).
	Domain bool
}

type column struct {
	Name      string
	Index     int
	Type      pgType
	NotNull   bool
	HasDef    bool // default, identity or generated
	Generated bool
	MaxLen    int // varchar(n)/char(n) length in characters, -1 if unlimited
}

// table is the cached catalog description of a target table.
type table struct {
	Schema, Name string
	Ident        string // quoted "schema"."name"
	Columns      []*column
	byName       map[string]*column
	PrimaryKey   []string   // primary key column names in index order, nil if none
	Unique       [][]string // key columns of every valid, non-partial, non-expression unique index (PK included)
}

func (t *table) column(name string) *column { return t.byName[name] }

// hasUnique reports whether a unique index covers exactly cols (any order),
// which INSERT … ON CONFLICT (cols) needs.
func (t *table) hasUnique(cols []string) bool {
	want := slices.Clone(cols)
	slices.Sort(want)
	for _, u := range t.Unique {
		got := slices.Clone(u)
		slices.Sort(got)
		if slices.Equal(got, want) {
			return true
		}
	}
	return false
}

// tableCache caches table descriptions by quoted name. Concurrent loads of
// the same table may race; the last one wins, which is harmless.
type tableCache struct {
	mu     sync.Mutex
	tables map[string]*table
}

func (c *tableCache) get(key string) *table {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tables[key]
}

func (c *tableCache) put(key string, t *table) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tables == nil {
		c.tables = make(map[string]*table)
	}
	c.tables[key] = t
}

func (c *tableCache) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tables, key)
}

const relationQuery = `
SELECT c.oid
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p', 'f', 'v')`

// columnsQuery lists the live columns with their types; a domain is
// described by its base type's kind, through any depth of domains over
// domains (pgcatalog.BaseType), arrays by their element type.
var columnsQuery = `
SELECT a.attname,
       a.atttypid,
       tn.nspname, t.typname,
       bt.oid, bt.typname, bt.typtype, bt.typcategory,
       coalesce(et.oid, 0), coalesce(etn.nspname, ''), coalesce(et.typname, ''), coalesce(et.typtype, ''), coalesce(et.typcategory, ''),
       a.attnotnull,
       a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '',
       a.attgenerated <> '',
       CASE WHEN bt.typname IN ('varchar', 'bpchar') AND a.atttypmod > 4 THEN a.atttypmod - 4 ELSE -1 END
FROM pg_catalog.pg_attribute a
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
JOIN pg_catalog.pg_namespace tn ON tn.oid = t.typnamespace
` + pgcatalog.BaseType("t", "base") + `
JOIN pg_catalog.pg_type bt ON bt.oid = base.oid
LEFT JOIN pg_catalog.pg_type et ON et.oid = bt.typelem AND bt.typcategory = 'A'
LEFT JOIN pg_catalog.pg_namespace etn ON etn.oid = et.typnamespace
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

const uniqueQuery = `
SELECT i.indisprimary, array_agg(a.attname::text ORDER BY k.ord)
FROM pg_catalog.pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
  AND k.ord <= i.indnkeyatts
GROUP BY i.indexrelid, i.indisprimary
ORDER BY i.indisprimary DESC, i.indexrelid`

// loadTable reads a table's description from the catalog inside tx. It
// returns an error wrapping ErrTableNotFound when the table does not exist.
func loadTable(ctx context.Context, tx pgx.Tx, schema, name string) (*table, error) {
	ident := pgx.Identifier{schema, name}.Sanitize()
	var oid uint32
	err := tx.QueryRow(ctx, relationQuery, schema, name).Scan(&oid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("postgres: table %s: %w (create it, or set auto.create=true to have txsink create it from the first record)", ident, ErrTableNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: look up table %s: %w", ident, err)
	}
	t := &table{Schema: schema, Name: name, Ident: ident, byName: make(map[string]*column)}

	rows, err := tx.Query(ctx, columnsQuery, oid)
	if err != nil {
		return nil, fmt.Errorf("postgres: read columns of %s: %w", ident, err)
	}
	for rows.Next() {
		var (
			c                                       column
			typNsp, typName                         string
			baseOID                                 uint32
			baseName, baseTypType, baseCat          string
			elemOID                                 uint32
			elemNsp, elemName, elemTypType, elemCat string
		)
		if err := rows.Scan(&c.Name, &c.Type.OID, &typNsp, &typName,
			&baseOID, &baseName, &baseTypType, &baseCat,
			&elemOID, &elemNsp, &elemName, &elemTypType, &elemCat,
			&c.NotNull, &c.HasDef, &c.Generated, &c.MaxLen); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: read columns of %s: %w", ident, err)
		}
		c.Type.Name = pgx.Identifier{typNsp, typName}.Sanitize()
		c.Type.Domain = baseOID != c.Type.OID
		c.Type.Kind = kindOf(baseOID, baseName, baseTypType, baseCat)
		if baseCat == "A" && elemOID != 0 {
			c.Type.Kind = kindArray
			c.Type.Elem = &pgType{OID: elemOID, Name: pgx.Identifier{elemNsp, elemName}.Sanitize(),
				Kind: kindOf(elemOID, elemName, elemTypType, elemCat)}
		}
		c.Index = len(t.Columns)
		t.Columns = append(t.Columns, &c)
		t.byName[c.Name] = &c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: read columns of %s: %w", ident, err)
	}

	rows, err = tx.Query(ctx, uniqueQuery, oid)
	if err != nil {
		return nil, fmt.Errorf("postgres: read indexes of %s: %w", ident, err)
	}
	for rows.Next() {
		var primary bool
		var cols []string
		if err := rows.Scan(&primary, &cols); err != nil {
			rows.Close()
			return nil, fmt.Errorf("postgres: read indexes of %s: %w", ident, err)
		}
		if primary {
			t.PrimaryKey = cols
		}
		t.Unique = append(t.Unique, cols)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: read indexes of %s: %w", ident, err)
	}
	return t, nil
}

// kindOf maps a (base) type to the conversion the writer applies.
func kindOf(oid uint32, name, typtype, category string) colKind {
	switch name {
	case "int2":
		return kindInt2
	case "int4":
		return kindInt4
	case "int8":
		return kindInt8
	case "numeric":
		return kindNumeric
	case "float4":
		return kindFloat4
	case "float8":
		return kindFloat8
	case "bool":
		return kindBool
	case "timestamptz":
		return kindTimestamptz
	case "timestamp":
		return kindTimestamp
	case "date":
		return kindDate
	case "time":
		return kindTime
	case "uuid":
		return kindUUID
	case "json":
		return kindJSON
	case "jsonb":
		return kindJSONB
	case "bytea":
		return kindBytea
	}
	switch {
	case typtype == "e":
		return kindEnum
	case category == "S" && typtype == "b":
		// text, varchar, bpchar, name, and extension string types such as
		// citext, whose binary format is the text itself.
		return kindText
	case typtype == "b" && category != "A" && knownToPgx(oid):
		return kindOther
	}
	return kindUnsupported
}
