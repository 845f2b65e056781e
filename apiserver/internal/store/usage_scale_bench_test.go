package store_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc/apiserver/internal/store"
	"github.com/svc-dev/svc/apiserver/internal/store/storetest"
)

// controlRows is how many usage records the control database holds: a few
// a day, so that its daily aggregates have the filled database's shape
// (every day of the 90 and every fill model) with almost no raw rows.
const controlRows = 9_000

// BenchmarkUsageAtScale times what the request path and the console do
// with usage — a usage batch write, the admission read (rate counters and
// usage windows), the reads of the console's usage page and the page itself
// (GET through the API server's handler, signed in) — on two databases
// that differ only in their raw rows (docs/gateway.md, Usage at scale): the
// filled one's workspace has SVC_BENCH_USAGE_ROWS usage records (default
// 100,000) over the 90 days before today, the control's 9,000 over the
// same days. Both have the same partitions (the legacy partition ending
// before the 90 days, a partition a day from then on: a database migrated
// long ago), the same daily aggregate rows, windows and rate counters.
// The operations are timed in alternating rounds within the one run: each
// operation on one database and then on the other, the order swapped every
// round; the first rounds warm up and are not counted. It reports each
// operation's mean, p50 and p99 on both sides and their ratio. Run big
// loads only on a machine of their own:
//
//	SVC_BENCH_USAGE_ROWS=100000000 go test -run '^$' -bench BenchmarkUsageAtScale -benchtime 2000x ./internal/store/
//
// SVC_BENCH_USAGE_DATABASE_URL and SVC_BENCH_USAGE_CONTROL_URL name two
// PostgreSQL databases on the same server that are kept between runs: the
// records are added to their workspace "bench-usage" only up to what each
// should hold (nothing when it has them), so the fill can run once while
// the machine is busy and the timing later on a quiet one. Without them
// both are fresh test databases.
func BenchmarkUsageAtScale(b *testing.B) {
	rows := int64(100_000)
	if v := os.Getenv("SVC_BENCH_USAGE_ROWS"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		rows = n
	}
	sides := [2]*usageSide{{name: "control", rows: controlRows}, {name: "filled", rows: rows}}
	filledURL, controlURL := os.Getenv("SVC_BENCH_USAGE_DATABASE_URL"), os.Getenv("SVC_BENCH_USAGE_CONTROL_URL")
	if (filledURL == "") != (controlURL == "") {
		b.Fatal("set SVC_BENCH_USAGE_DATABASE_URL and SVC_BENCH_USAGE_CONTROL_URL together (two databases on the same server), or neither")
	}
	for i, url := range []string{controlURL, filledURL} {
		if url != "" {
			sides[i].s, sides[i].ws = keptUsageDB(b, url)
		} else {
			sides[i].s = storetest.Postgres(b)
			w, err := sides[i].s.CreateWorkspace(context.Background(), "bench-usage", "free")
			if err != nil {
				b.Fatal(err)
			}
			sides[i].ws = w.ID
		}
		start := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -usageFillDays)
		migratedLongAgo(b, sides[i].s, start)
		fillUsage(b, sides[i].s, sides[i].ws, sides[i].rows)
		// What every replica does at start: the days ahead exist.
		if _, err := sides[i].s.MaintainUsagePartitions(context.Background(), time.Now(), 0); err != nil {
			b.Fatal(err)
		}
		sides[i].page = consoleUsagePage(b, sides[i].s, sides[i].ws)
	}
	// Like with like: the same aggregate rows of the fill and the same
	// partitions on both sides (the timed writes' rows are the same on
	// both after runs against both; a noise-floor run against the control
	// alone adds its own, which the log shows).
	c, f := usageShape(b, sides[0]), usageShape(b, sides[1])
	if c.fillDaily != f.fillDaily || c.partitions != f.partitions {
		b.Fatalf("the databases differ in more than raw rows: control %+v, filled %+v", c, f)
	}
	b.Logf("both: %d partitions, %d usage_daily rows of the fill; all usage_daily rows of the workspace: %d (control), %d (filled); today's partition: %d rows (control), %d (filled)",
		c.partitions, c.fillDaily, c.daily, f.daily, c.today, f.today)
	run := time.Now().UnixNano() // request ids of this run's writes: new in a kept database too
	ops := []struct {
		name string
		do   func(ctx context.Context, u *usageSide) error
	}{
		{"record", func(ctx context.Context, u *usageSide) error {
			u.n++
			now := time.Now()
			rec := store.UsageRecord{RequestID: fmt.Sprintf("bench-new-%d-%d", run, u.n), WorkspaceID: u.ws, Model: "m",
				Deployment: "main/up", PromptTokens: 10, CreditsMicro: 100, CreatedAt: now}
			return u.s.RecordUsageBatch(ctx, []store.UsageRecord{rec}, [][]store.WindowSpec{benchWindows}, now)
		}},
		{"admit", func(ctx context.Context, u *usageSide) error {
			win := time.Now().Truncate(time.Minute).UnixMilli()
			_, err := u.s.Admit(ctx, win, []store.RateIncrement{{Bucket: "key:bench", N: 1}}, u.ws, true)
			return err
		}},
		{"reads", consoleUsageReads},
		{"page", func(ctx context.Context, u *usageSide) error { return u.page(ctx) }},
	}
	b.Run("alternating", func(b *testing.B) {
		ctx := context.Background()
		warm := min(b.N, 20)
		took := [2][][]time.Duration{make([][]time.Duration, len(ops)), make([][]time.Duration, len(ops))}
		b.ResetTimer()
		for round := range warm + b.N {
			order := []int{0, 1}
			if round%2 == 1 {
				order = []int{1, 0}
			}
			for o, op := range ops {
				for _, i := range order {
					began := time.Now()
					if err := op.do(ctx, sides[i]); err != nil {
						b.Fatalf("%s on %s: %v", op.name, sides[i].name, err)
					}
					if round >= warm {
						took[i][o] = append(took[i][o], time.Since(began))
					}
				}
			}
		}
		b.StopTimer()
		var table strings.Builder
		fmt.Fprintf(&table, "%d rounds (after %d not counted); control %d records, filled %d; ms per call\n", b.N, warm, controlRows, rows)
		fmt.Fprintf(&table, "%-7s %26s %26s %20s\n", "", "control mean/p50/p99", "filled mean/p50/p99", "ratio mean/p50/p99")
		for o, op := range ops {
			c, f := summarise(took[0][o]), summarise(took[1][o])
			fmt.Fprintf(&table, "%-7s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %6.2f %6.2f %6.2f\n", op.name,
				c[0], c[1], c[2], f[0], f[1], f[2], f[0]/c[0], f[1]/c[1], f[2]/c[2])
			for k, stat := range []string{"mean", "p50", "p99"} {
				b.ReportMetric(c[k], op.name+"-control-"+stat+"-ms")
				b.ReportMetric(f[k], op.name+"-filled-"+stat+"-ms")
				b.ReportMetric(f[k]/c[k], op.name+"-ratio-"+stat)
			}
		}
		if b.N > 1 { // not the framework's first probe of one round
			b.Log("\n" + table.String())
		}
	})
}

// usageSide is one database of the comparison.
type usageSide struct {
	name string
	rows int64 // usage records its workspace holds
	s    *store.Store
	ws   string
	n    int // records written by this run
	page func(ctx context.Context) error
}

// benchWindows is the plan window each timed usage write adds to.
var benchWindows = []store.WindowSpec{{Name: "5h", Duration: 5 * time.Hour}}

// consoleUsageReads are the database reads of the console's usage page
// (console.UsagePage): the window counters, the all-time totals and the
// chart's days by model. The page adds a template render that reads no row.
func consoleUsageReads(ctx context.Context, u *usageSide) error {
	if _, err := u.s.UsageWindows(ctx, u.ws); err != nil {
		return err
	}
	if _, err := u.s.SumUsage(ctx, u.ws); err != nil {
		return err
	}
	start := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -13) // console.ChartDays
	_, err := u.s.UsageByDay(ctx, u.ws, start)
	return err
}

// summarise is the mean, p50 and p99 of d in milliseconds.
func summarise(d []time.Duration) [3]float64 {
	if len(d) == 0 {
		return [3]float64{}
	}
	d = slices.Clone(d)
	slices.Sort(d)
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	at := func(q float64) float64 {
		return float64(d[min(len(d)-1, int(q*float64(len(d))))].Microseconds()) / 1000
	}
	return [3]float64{float64(sum.Microseconds()) / float64(len(d)) / 1000, at(0.50), at(0.99)}
}

// shape is what the two databases must share.
type shape struct{ fillDaily, daily, partitions, today int64 }

func usageShape(b *testing.B, u *usageSide) shape {
	b.Helper()
	var sh shape
	today := "usage_records_" + time.Now().UTC().Format("20060102")
	if err := u.s.DB().QueryRowContext(context.Background(), `SELECT
  (SELECT count(*) FROM usage_daily WHERE workspace_id = $1 AND model LIKE 'fill%'),
  (SELECT count(*) FROM usage_daily WHERE workspace_id = $1),
  (SELECT count(*) FROM pg_inherits WHERE inhparent = 'usage_records'::regclass),
  (SELECT count(*) FROM usage_records WHERE created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
     AND created_at < (date_trunc('day', now() AT TIME ZONE 'UTC') + interval '1 day') AT TIME ZONE 'UTC')`, u.ws).
		Scan(&sh.fillDaily, &sh.daily, &sh.partitions, &sh.today); err != nil {
		b.Fatalf("%s: %v", today, err)
	}
	return sh
}
