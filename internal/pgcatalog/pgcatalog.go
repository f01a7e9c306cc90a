// Package pgcatalog holds SQL over PostgreSQL's catalog that more than
// one part of txsink reads: the sink's table descriptions and verify's
// source columns.
package pgcatalog

// BaseType returns a CROSS JOIN LATERAL clause, to follow a pg_type row
// aliased typ, whose columns alias.oid and alias.typmod are the type's
// base type through any depth of domains over domains (the type itself
// when it is not a domain) and the type modifier of the outermost domain
// of the chain that has one (-1: none). A domain's typbasetype names the
// type it was declared over, which may be a domain itself.
func BaseType(typ, alias string) string {
	return `CROSS JOIN LATERAL (
	WITH RECURSIVE chain(oid, typmod, depth) AS (
		SELECT ` + typ + `.oid, -1, 0
		UNION ALL
		SELECT d.typbasetype, CASE WHEN c.typmod <> -1 THEN c.typmod ELSE d.typtypmod END, c.depth + 1
		FROM chain c JOIN pg_catalog.pg_type d ON d.oid = c.oid
		WHERE d.typtype = 'd'
	)
	SELECT oid, typmod FROM chain ORDER BY depth DESC LIMIT 1
) ` + alias
}
