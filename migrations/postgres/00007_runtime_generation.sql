-- The Kubernetes runtime driver names a project's pod after a
-- generation counter kept with the runtime assignment. Replacing the pod
-- (restart, idle stop, a vanished or failed pod) advances it with a
-- compare-and-set, so every API replica agrees on which pod is current and
-- two replicas racing for one project create one pod.

-- +goose Up
ALTER TABLE runtime_assignments ADD COLUMN generation BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE runtime_assignments DROP COLUMN generation;
