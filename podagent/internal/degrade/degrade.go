// Package degrade is the durability-health state machine of a pod (spec 3.2):
//
//	gitOnlyHealthy --degradeAfterFailures consecutive failures--> degraded
//	    onDegrade; S3Sync.setSuppressProjectArchive(false); log "cloud-sync degraded (mode=<mode>)"
//	degraded --next success--> gitOnlyHealthy
//	    onRecovered; S3Sync.setSuppressProjectArchive(true); counter reset; log "cloud-sync recovered (mode=<mode>)"
//
// A durability step is the persist of .git in git_only (the push in
// dual_shadow). A failed checkpoint POST is not a durability step and must
// not be reported here. The machine is pure: no goroutines, no clock, no I/O
// beyond the injected callbacks and logger, which it calls synchronously in
// the order above, one transition at a time.
package degrade

import (
	"sync"

	"go.uber.org/zap"

	"github.com/svc-dev/svc/shared/settings"
	"github.com/svc-dev/svc/shared/syncmode"
)

// DefaultAfterFailures is degradeAfterFailures when not configured (spec 8).
const DefaultAfterFailures = 3

// State is the durability health.
type State int

const (
	Healthy State = iota
	Degraded
)

func (s State) String() string {
	if s == Degraded {
		return "degraded"
	}
	return "gitOnlyHealthy"
}

// Callbacks are the side effects of transitions; nil fields are skipped.
// They run with the machine's lock held and must not call back into it.
type Callbacks struct {
	OnDegrade   func()
	OnRecovered func()
	// SetSuppressProjectArchive is S3Sync.setSuppressProjectArchive.
	SetSuppressProjectArchive func(bool)
}

// Machine is safe for concurrent use.
type Machine struct {
	mode      syncmode.Mode
	threshold int
	cb        Callbacks
	log       *zap.Logger

	mu       sync.Mutex
	state    State
	failures int
}

// New returns a healthy machine. threshold <= 0 means DefaultAfterFailures.
func New(mode syncmode.Mode, threshold int, cb Callbacks, log *zap.Logger) *Machine {
	threshold = settings.PositiveOr(threshold, DefaultAfterFailures)
	if log == nil {
		log = zap.NewNop()
	}
	return &Machine{mode: mode, threshold: threshold, cb: cb, log: log}
}

// Failure reports a failed durability step and returns the state after it.
func (m *Machine) Failure(err error) State {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.failures++
	if m.state == Healthy && m.failures >= m.threshold {
		m.state = Degraded
		if m.cb.OnDegrade != nil {
			m.cb.OnDegrade()
		}
		if m.cb.SetSuppressProjectArchive != nil {
			m.cb.SetSuppressProjectArchive(false)
		}
		m.log.Warn("cloud-sync degraded (mode="+string(m.mode)+")",
			zap.Int("consecutiveFailures", m.failures), zap.Error(err))
	}
	return m.state
}

// Success reports a successful durability step and returns the state after it.
func (m *Machine) Success() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == Degraded {
		m.state = Healthy
		if m.cb.OnRecovered != nil {
			m.cb.OnRecovered()
		}
		if m.cb.SetSuppressProjectArchive != nil {
			m.cb.SetSuppressProjectArchive(true)
		}
		failures := m.failures
		m.failures = 0
		m.log.Info("cloud-sync recovered (mode="+string(m.mode)+")", zap.Int("failuresBeforeRecovery", failures))
		return m.state
	}
	m.failures = 0
	return m.state
}

// State returns the current state.
func (m *Machine) State() State {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.state
}

// Degraded reports whether the state is Degraded.
func (m *Machine) Degraded() bool { return m.State() == Degraded }

// ConsecutiveFailures returns the failure counter.
func (m *Machine) ConsecutiveFailures() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failures
}
