-- +goose Up
-- A host row is inserted at registration at about 195 bytes (ids, hostname, agent id, NATS key) and
-- grows to about 380 with its first heartbeat (agent version, config hash, per-type versions). At
-- fillfactor 60 (migration 00002) a page of new rows has no room for them grown: on a 20,000-host copy
-- of the schema only 77% of the first heartbeats' updates were HOT, each of the others moved its row to
-- another page and inserted into all five of hosts' indexes, and the table grew from 870 to 1,600 pages
-- over the first heartbeats while the heartbeat write cost PostgreSQL 40 µs per row instead of 25-28.
-- At fillfactor 30 a page of new rows holds them grown and the old versions beside them: every update
-- was HOT from the first heartbeat on, and the table is registered at about the size it grew to anyway
-- (1,819 pages). It applies to pages written from now on (new hosts); existing rows have grown already.
ALTER TABLE hosts SET (fillfactor = 30);

-- +goose Down
ALTER TABLE hosts SET (fillfactor = 60);
