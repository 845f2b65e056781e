-- Sync modes (docs/sync-modes.md): every checkpoint row carries its turn number
-- (the commit's first-parent depth; 0 is the seed), which the parity check
-- compares rows with; a project remembers when its sync mode last changed,
-- for the dual_shadow cohort guidance (spec 8: at most 7 days).

-- +goose Up
ALTER TABLE project_checkpoints ADD COLUMN turn integer;
CREATE INDEX project_checkpoints_turn_idx ON project_checkpoints (project_id, turn);
ALTER TABLE projects ADD COLUMN sync_mode_changed_at datetime;

-- +goose Down
ALTER TABLE projects DROP COLUMN sync_mode_changed_at;
DROP INDEX project_checkpoints_turn_idx;
ALTER TABLE project_checkpoints DROP COLUMN turn;
