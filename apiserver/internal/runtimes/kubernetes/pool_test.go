package kubernetes

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A spare is a pod of the pool no project claimed; its slot and seq come
// from its annotation, which a claimed pod keeps.
func TestSpareSlots(t *testing.T) {
	t.Parallel()
	pod := func(lbl, ann map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: lbl, Annotations: ann}}
	}
	cases := []struct {
		name        string
		pod         *corev1.Pod
		spare       bool
		slot, seq   int
		hasSlotInfo bool
	}{
		{"unclaimed spare", pod(map[string]string{LabelSpare: "1"}, map[string]string{AnnotationSpare: "1-7"}), true, 1, 7, true},
		{"claimed spare", pod(map[string]string{LabelProject: "prj_a"}, map[string]string{AnnotationSpare: "0-3"}), false, 0, 3, true},
		{"spare label beside a project (mid-release)", pod(map[string]string{LabelSpare: "0", LabelProject: "prj_a"}, map[string]string{AnnotationSpare: "0-1"}), false, 0, 1, true},
		{"a project's created pod", pod(map[string]string{LabelProject: "prj_a"}, nil), false, 0, 0, false},
		{"a damaged annotation", pod(map[string]string{LabelSpare: "0"}, map[string]string{AnnotationSpare: "x-1"}), true, 0, 0, false},
	}
	for _, c := range cases {
		if got := isSpare(c.pod); got != c.spare {
			t.Errorf("%s: isSpare = %v, want %v", c.name, got, c.spare)
		}
		slot, seq, ok := spareSlot(c.pod)
		if ok != c.hasSlotInfo || (ok && (slot != c.slot || seq != c.seq)) {
			t.Errorf("%s: spareSlot = %d, %d, %v; want %d, %d, %v", c.name, slot, seq, ok, c.slot, c.seq, c.hasSlotInfo)
		}
	}
	if got := SpareName(2, 5); got != "svc-rt-spare-2-5" {
		t.Errorf("SpareName(2, 5) = %q", got)
	}
}

// A claimed spare was created long before its project used it: its claim
// is its first use, so the idle reaper does not stop it at once.
func TestLastUseOfAClaimedSpare(t *testing.T) {
	t.Parallel()
	d := &Driver{lastUsed: map[string]time.Time{}}
	created := time.Now().Add(-time.Hour)
	claimed := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	used := time.Now().Add(-time.Second).UTC().Truncate(time.Millisecond)
	cases := []struct {
		name string
		ann  map[string]string
		want time.Time
	}{
		{"created for the project", nil, created.Truncate(time.Second)},
		{"claimed", map[string]string{AnnotationClaimedAt: claimed.Format(time.RFC3339Nano)}, claimed},
		{"claimed, then used", map[string]string{AnnotationClaimedAt: claimed.Format(time.RFC3339Nano),
			AnnotationLastUsed: used.Format(time.RFC3339Nano)}, used},
	}
	for _, c := range cases {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: c.ann,
			CreationTimestamp: metav1.NewTime(created.Truncate(time.Second))}}
		if got := d.lastUse(pod); !got.Equal(c.want) {
			t.Errorf("%s: lastUse = %s, want %s", c.name, got, c.want)
		}
	}
}
