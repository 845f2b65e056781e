package wire

import "time"

// Micro-VM runtime (spec 10.5): the guest's export routes the metal host
// pulls from (runtime-token bearer, like every /agent/* route) and the metal
// host's own API the apiserver's metal driver calls (host token bearer).
const (
	// MetalExportPrefix + MetalPart* streams one archive from the guest:
	// git commits the live tree first and returns the .git layout of
	// repoarchive; data is the work tree without .git; src is HEAD's content.
	MetalExportPrefix = "/agent/metal/export/"
	MetalPartGit      = "git"
	MetalPartData     = "data"
	MetalPartSrc      = "src"
	// MetalPoweroffPath flushes the guest's disk and ends the VM.
	MetalPoweroffPath = "/agent/metal/poweroff"

	// MetalHostProjectsPath + "/{projectId}" is a project's VM on the host:
	// PUT ensures it runs (MetalStartRequest → MetalProject), GET reports
	// it, DELETE stops it (?mode=suspend|discard).
	MetalHostProjectsPath = "/v1/projects"
)

// Stop modes of DELETE {MetalHostProjectsPath}/{id}.
const (
	// MetalStopSuspend exports everything (source archive included) and, when
	// snapshots are on, saves the VM state for a fast resume.
	MetalStopSuspend = "suspend"
	// MetalStopDiscard rescues the workspace (guest export, else the disk)
	// and drops the VM; nothing saved means the disk is quarantined.
	MetalStopDiscard = "discard"
)

// MetalStartRequest is the body of PUT {MetalHostProjectsPath}/{id}.
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
