package wire

// HeaderOwnerEpoch carries the pushing pod's ownership epoch on its pushes
// to the API origin (dual_shadow): the API refuses a push whose epoch is
// not the one the project's ownership record holds (docs/sync-modes.md §11).
const HeaderOwnerEpoch = "X-Svc-Owner-Epoch"
