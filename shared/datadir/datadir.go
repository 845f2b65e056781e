// Package datadir is the one layout of SVC_DATA_DIR (docs/design.md §4,
// "Embedded defaults"): every binary that keeps files there finds them
// through these functions, so the API server and the pods it starts on one
// machine agree on, for example, where the fs object store lives.
//
//	<data dir>/svc.lock             the API server's owner lock (pid, host; Acquire)
//	<data dir>/store                the fs object store (API and local pods share it)
//	<data dir>/svc.db               the embedded SQLite database
//	<data dir>/hydrated             the API's hydrated repository copies
//	<data dir>/runtimes/<project>   a local runtime's pod (workspace, logs)
//	<data dir>/runtime-auth-secret  the runtime secret `make run` generated
//	<data dir>/demo-*               what `make run` prints (key, project, channel secret)
package datadir

import "path/filepath"

// Store is the fs object store's root.
func Store(dir string) string { return filepath.Join(dir, "store") }

// Database is the SQLite file used when SVC_DATABASE_URL is empty.
func Database(dir string) string { return filepath.Join(dir, "svc.db") }

// Hydrated holds the API server's hydrated repository copies.
func Hydrated(dir string) string { return filepath.Join(dir, "hydrated") }

// Runtime is the directory of one project's local runtime.
func Runtime(dir, projectID string) string { return filepath.Join(dir, "runtimes", projectID) }

// RuntimeSecret is the file `make run` keeps its runtime auth secret in.
func RuntimeSecret(dir string) string { return filepath.Join(dir, "runtime-auth-secret") }

// Demo is one of the files `make run` writes for the user (name without
// the "demo-" prefix: "api-key", "project", "channel-secret").
func Demo(dir, name string) string { return filepath.Join(dir, "demo-"+name) }
