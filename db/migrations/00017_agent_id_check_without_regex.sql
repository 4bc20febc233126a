-- +goose NO TRANSACTION
-- +goose Up
-- hosts.agent_id's CHECK (migration 00001) was a regular expression, and PostgreSQL evaluates a row's
-- CHECK constraints on every UPDATE of it, whatever columns change: perf of the backends put 40% of the
-- heartbeat UPDATE's CPU in that regex. The same rule (protocol.ValidAgentID: 1 to 128 characters of
-- [A-Za-z0-9_-]) without a regex: every allowed character removed by translate must leave nothing, and
-- length (in characters; with only ASCII left they are bytes) bounds it. TestAgentIDCheckIsValidAgentID
-- holds the two to the same answers.
--
-- No transaction, so that a big hosts table is never locked for the length of a scan: the new constraint
-- is added NOT VALID (a short ACCESS EXCLUSIVE lock, no scan), validated under a SHARE UPDATE EXCLUSIVE
-- lock (reads and writes go on; the rows are checked), and only then is the old one dropped. Every
-- statement can run again after a failure part way.
ALTER TABLE hosts DROP CONSTRAINT IF EXISTS hosts_agent_id_chars;
ALTER TABLE hosts ADD CONSTRAINT hosts_agent_id_chars CHECK (
    length(agent_id) BETWEEN 1 AND 128
    AND translate(agent_id, 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-', '') = ''
) NOT VALID;
ALTER TABLE hosts VALIDATE CONSTRAINT hosts_agent_id_chars;
ALTER TABLE hosts DROP CONSTRAINT IF EXISTS hosts_agent_id_check;

-- +goose Down
ALTER TABLE hosts DROP CONSTRAINT IF EXISTS hosts_agent_id_check;
ALTER TABLE hosts ADD CONSTRAINT hosts_agent_id_check CHECK (agent_id ~ '^[A-Za-z0-9_-]{1,128}$') NOT VALID;
ALTER TABLE hosts VALIDATE CONSTRAINT hosts_agent_id_check;
ALTER TABLE hosts DROP CONSTRAINT IF EXISTS hosts_agent_id_chars;
