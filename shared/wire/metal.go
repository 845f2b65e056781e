package wire

import "time"

// Micro-VM runtime (spec 10.5): the archives the metal host pulls from a
// guest (internalapi.PodMetalExport + part).
const (
	MetalPartGit  = "git"
	MetalPartData = "data"
	MetalPartSrc  = "src"
)

// Stop modes of DELETE internalapi.MetalHostProjects/{id}.
const (
	// MetalStopSuspend exports everything (source archive included) and, when
	// snapshots are on, saves the VM state for a fast resume.
	MetalStopSuspend = "suspend"
	// MetalStopDiscard rescues the workspace (guest export, else the disk)
	// and drops the VM; nothing saved means the disk is quarantined.
	MetalStopDiscard = "discard"
)

// MetalStartRequest is the body of PUT internalapi.MetalHostProjects/{id}.
type MetalStartRequest struct {
	// RuntimeToken is the project's runtime token: the guest's pod checks it
	// on /agent/* and sends it to the API; the host sends it to the guest.
	RuntimeToken string `json:"runtimeToken"`
	// CloudSyncMode is the project's mode (git_only).
	CloudSyncMode string `json:"cloudSyncMode,omitempty"`
}

// MetalProject is a project's VM as the host reports it.
type MetalProject struct {
	ProjectID string    `json:"projectId"`
	State     string    `json:"state"` // running, stopped, rescued, quarantined
	URL       string    `json:"url,omitempty"`
	PID       int       `json:"pid,omitempty"`
	BootKind  string    `json:"bootKind,omitempty"` // cold or snapshot
	StartedAt time.Time `json:"startedAt,omitzero"`
	// LastExport is when the host last stored the guest's .git.
	LastExport time.Time `json:"lastExport,omitzero"`
	LastError  string    `json:"lastError,omitempty"`
}
