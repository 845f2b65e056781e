package wire

// A warm pool's spare pod (docs/scale.md, "A warm pool") starts holding no
// project: its /readyz answers PodReadiness{Status: PodUnassigned}, and the
// API hands it a project with one PodClaim, authenticated by the pod's own
// bootstrap token (runtimetoken.Bootstrap: derived from the runtime auth
// secret and the pod's name, so no two pods share one). After the claim the
// pod claims the project's ownership record and cold-starts exactly as a
// pod created for the project does, and then answers /readyz as the
// project's pod of that generation.

// PodUnassigned is the readiness Status of a spare pod no project claimed.
const PodUnassigned = "unassigned"

// PodStarting is the readiness Status of a claimed pod still cold-starting
// (answered with 503).
const PodStarting = "starting"

// PodClaim is the body of the claim call (POST internalapi.PodClaim).
type PodClaim struct {
	ProjectID string `json:"projectId"`
	// SyncMode is the project's cloud sync mode at assignment (spec 3.1).
	SyncMode string `json:"syncMode"`
	// Generation is the runtime driver's generation of the pod: its claim
	// on the project's ownership record carries it.
	Generation int64 `json:"generation"`
	// RuntimeToken is the project's runtime token.
	RuntimeToken string `json:"runtimeToken"`
}

// PodClaimAnswer is the pod's answer to an accepted claim (202): the claim it
// now serves, without the token.
type PodClaimAnswer struct {
	ProjectID  string `json:"projectId"`
	Generation int64  `json:"generation"`
	Status     string `json:"status"`
}
