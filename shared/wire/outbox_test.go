package wire

import (
	"testing"
	"time"

	"github.com/svc-dev/svc/shared/testenv/tabletest"
)

func TestParseOutboxWaitAndLimit(t *testing.T) {
	t.Parallel()
	tabletest.CheckParse(t, "ParseOutboxWait", ParseOutboxWait, map[string]time.Duration{
		"": 0, "0": 0, "2.5": 2500 * time.Millisecond, "500ms": 500 * time.Millisecond,
		"31": OutboxMaxWait, "1e300": OutboxMaxWait, "1h": OutboxMaxWait, "+Inf": OutboxMaxWait,
	}, "-1", "-Inf", "abc", "NaN")
	tabletest.CheckParse(t, "ParseOutboxLimit", ParseOutboxLimit, map[string]int{
		"": 20, "5": 5, "100": 100, "1000": 100,
	}, "0", "-3", "x")
}
