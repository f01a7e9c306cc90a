-- The compose file's "cdc" profile: the source database's tables and a
-- first few rows (Debezium's initial snapshot sends them as op "r").
CREATE TABLE customers (
	id bigint PRIMARY KEY,
	name text NOT NULL,
	email text,
	created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE orders (
	id integer PRIMARY KEY,
	customer_id bigint NOT NULL,
	amount numeric(12,2),
	status text NOT NULL
);
INSERT INTO customers (id, name, email) VALUES (1, 'Ada', 'ada@example.org'), (2, 'Bob', NULL);
INSERT INTO orders VALUES (1, 1, 12.50, 'new'), (2, 2, 3.00, 'paid');
