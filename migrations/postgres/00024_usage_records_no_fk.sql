-- Usage records carry no foreign key to workspaces (docs/gateway.md, "Usage
-- at scale"). A day partition with a foreign key to workspaces has action
-- triggers on workspaces: creating one takes SHARE ROW EXCLUSIVE on
-- workspaces and dropping a detached one (the retention job) ACCESS
-- EXCLUSIVE, and every request's foreign-key check on workspaces waits
-- behind it. Dropping the parent's constraint drops every partition's with
-- it (the legacy partition's too: it was attached as the parent's). No code
-- deletes a workspace; whatever does must delete its usage_records in the
-- same transaction (usage_daily, usage_windows and the others keep their
-- ON DELETE CASCADE).
-- This statement itself takes ACCESS EXCLUSIVE on workspaces and
-- usage_records for as long as it runs (no scan: a moment).

-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE c record;
BEGIN
  FOR c IN SELECT con.conrelid::regclass AS rel, con.conname
      FROM pg_constraint con
      WHERE con.contype = 'f' AND con.confrelid = 'workspaces'::regclass AND con.conparentid = 0
        AND (con.conrelid = 'usage_records'::regclass
             OR con.conrelid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'usage_records'::regclass))
  LOOP
    EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', c.rel, c.conname);
  END LOOP;
END $$;
-- +goose StatementEnd

-- +goose Down
-- Rows of a workspace that no longer exists would have been deleted by the
-- cascade; they go first, or the constraint would not validate.
DELETE FROM usage_records r WHERE NOT EXISTS (SELECT 1 FROM workspaces w WHERE w.id = r.workspace_id);
ALTER TABLE usage_records ADD CONSTRAINT usage_records_workspace_id_fkey1
    FOREIGN KEY (workspace_id) REFERENCES workspaces(id) ON DELETE CASCADE;
