package wire

import "fmt"

// PodReadiness is a pod's /readyz answer (200). A pod names the project it
// serves and its runtime generation, so a runtime driver routes a project's
// messages only to a pod that says it is that project's: an address reused by
// another project's pod (a port two local pods raced for, a recycled pod IP)
// is never taken for the project's own. A warm pod that holds no project yet
// answers with an empty ProjectID.
type PodReadiness struct {
	Status     string `json:"status"`
	ProjectID  string `json:"projectId,omitempty"`
	Generation int64  `json:"generation,omitempty"`
}

// Serves is nil when r is the readiness of projectID's pod of generation gen
// (gen 0: any generation).
func (r PodReadiness) Serves(projectID string, gen int64) error {
	if r.ProjectID != projectID {
		return &WrongPodError{Want: projectID, Got: r.ProjectID, WantGen: gen, GotGen: r.Generation}
	}
	if gen != 0 && r.Generation != gen {
		return &WrongPodError{Want: projectID, Got: r.ProjectID, WantGen: gen, GotGen: r.Generation}
	}
	return nil
}

// WrongPodError is a readiness answer of a pod that is not the expected one.
type WrongPodError struct {
	Want, Got       string
	WantGen, GotGen int64
}

func (e *WrongPodError) Error() string {
	return fmt.Sprintf("the pod that answered is project %q generation %d, not project %q generation %d",
		e.Got, e.GotGen, e.Want, e.WantGen)
}
