package upstream

import (
	"sync"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/catalog"
)

// keyPool hands out a provider's API keys by smooth weighted round-robin
// (equal weights: plain round-robin) and skips keys that are cooling down
// after a 429 or 401. One pool per provider and replica.
type keyPool struct {
	mu   sync.Mutex
	keys []*poolKey
}

type poolKey struct {
	name, value string
	weight      int
	current     int
	coolUntil   time.Time
}

func newKeyPool(p catalog.Provider) *keyPool {
	kp := &keyPool{}
	for _, k := range p.Keys() {
		kp.keys = append(kp.keys, &poolKey{name: k.Name, value: k.Value, weight: k.Weight})
	}
	return kp
}

// empty reports a provider without keys (the dev provider, or an upstream
// that needs none): requests go out without Authorization.
func (p *keyPool) empty() bool { return len(p.keys) == 0 }

// pick returns the next key not cooling down at now, or nil when every key
// is cooling down; soonest is then when the first one is usable again.
func (p *keyPool) pick(now time.Time) (k *poolKey, soonest time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	total := 0
	for _, c := range p.keys {
		if now.Before(c.coolUntil) {
			if soonest.IsZero() || c.coolUntil.Before(soonest) {
				soonest = c.coolUntil
			}
			continue
		}
		c.current += c.weight
		total += c.weight
		if k == nil || c.current > k.current {
			k = c
		}
	}
	if k != nil {
		k.current -= total
	}
	return k, soonest
}

// cooldown keeps k out of rotation until until; it reports whether k was
// in rotation at now (so one cooldown is counted once).
func (p *keyPool) cooldown(k *poolKey, now, until time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	fresh := !now.Before(k.coolUntil)
	if until.After(k.coolUntil) {
		k.coolUntil = until
	}
	return fresh
}

// available reports whether some key is in rotation at now.
func (p *keyPool) available(now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, k := range p.keys {
		if !now.Before(k.coolUntil) {
			return true
		}
	}
	return false
}

// soonest is the key whose cooldown ends first (for a model with no
// alternative to wait for).
func (p *keyPool) soonest() *poolKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	var k *poolKey
	for _, c := range p.keys {
		if k == nil || c.coolUntil.Before(k.coolUntil) {
			k = c
		}
	}
	return k
}
