package wire

import (
	"testing"
	"time"
)

func TestPublishTag(t *testing.T) {
	t.Parallel()
	tag, err := PublishTag("my-app", time.Unix(1700000000, 0))
	if err != nil || tag != "publish/my-app/1700000000" {
		t.Fatalf("tag = %q, %v", tag, err)
	}
	for _, bad := range []string{"", "-x", "x-", "UPPER", "a.b", "a/b", "--upload-pack=x", string(make([]byte, 64))} {
		if _, err := PublishTag(bad, time.Now()); err == nil {
			t.Errorf("subdomain %q accepted", bad)
		}
	}
	for _, good := range []string{"publish/a/1", "publish/my-app/1700000000"} {
		if _, _, err := ParsePublishTag(good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"publish/a", "publish//1", "publish/a/", "publish/a/01", "publish/a/1/2", "publish/a/x", "release/a/1", "publish/a/-1", "publish/a/1 ", "publish/a/1\n"} {
		if _, _, err := ParsePublishTag(bad); err == nil {
			t.Errorf("tag %q accepted", bad)
		}
	}
}
