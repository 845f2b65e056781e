package syncmode_test

import (
	"testing"

	"github.com/svc-dev/svc/shared/syncmode"
	"github.com/svc-dev/svc/shared/testenv/tabletest"
)

func TestParse(t *testing.T) {
	t.Parallel()
	tabletest.CheckParse(t, "Parse", syncmode.Parse, map[string]syncmode.Mode{
		"":            syncmode.GitOnly,
		"git_only":    syncmode.GitOnly,
		"dual_shadow": syncmode.DualShadow,
		"s3":          syncmode.S3,
	}, "S3", "gitonly")
}
