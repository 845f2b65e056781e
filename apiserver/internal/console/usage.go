package console

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/svc-dev/svc/apiserver/internal/metering"
	"github.com/svc-dev/svc/apiserver/internal/store"
)

// ChartDays is how many days the usage chart shows.
const ChartDays = 14

// metrics of the usage chart.
var metrics = []struct{ Key, Label string }{
	{"requests", "Requests"}, {"tokens", "Tokens"}, {"credits", "Credits"},
}

type usageData struct {
	Plan              string
	PlanKnown         bool
	RPM, WorkspaceRPM int64
	Tiers             []string
	UsageBasedPricing bool
	Windows           []metering.WindowState
	Totals            store.UsageTotals
	Metric            string
	MetricLabel       string
	Metrics           []struct{ Key, Label string }
	Chart             chart
}

// chart is a stacked bar chart drawn as inline SVG (no script needed), with
// the same numbers in a table for screen readers.
type chart struct {
	Width, Height int
	Days          []string
	Models        []chartModel
	Bars          []chartBar
	Max           float64
	Ticks         []chartTick
	Labels        []chartLabel
	Rows          []chartRow
	Empty         bool
}

type chartModel struct {
	Name  string
	Class string
}

type chartBar struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

type chartTick struct {
	Y     float64
	Label string
}

type chartLabel struct {
	X, Y  float64
	Label string
}

type chartRow struct {
	Day    string
	Values []string
	Total  string
}

// UsagePage is GET /console/w/{ws}/usage[?metric=requests|tokens|credits].
func (c *Console) UsagePage(ec echo.Context) error {
	p := newPage(ec, "Usage", "usage")
	ctx := ec.Request().Context()
	now := c.o.Now().UTC()
	counters, err := c.o.Store.UsageWindows(ctx, p.WS.ID)
	if err != nil {
		return err
	}
	totals, err := c.o.Store.SumUsage(ctx, p.WS.ID)
	if err != nil {
		return err
	}
	start := now.Truncate(24*time.Hour).AddDate(0, 0, -(ChartDays - 1))
	days, err := c.o.Store.UsageByDay(ctx, p.WS.ID, start)
	if err != nil {
		return err
	}
	d := usageData{Plan: p.WS.Plan, UsageBasedPricing: p.WS.UsageBasedPricing, Totals: totals,
		Metric: "requests", Metrics: metrics}
	for _, m := range metrics {
		if m.Key == ec.QueryParam("metric") {
			d.Metric = m.Key
		}
		if m.Key == d.Metric {
			d.MetricLabel = m.Label
		}
	}
	if plan, ok := c.o.Catalog.Plan(p.WS.Plan); ok {
		d.PlanKnown, d.RPM, d.WorkspaceRPM, d.Tiers = true, plan.RPM, plan.WorkspaceRPM, plan.Tiers
		d.Windows = metering.WindowStates(plan, counters, now)
	}
	d.Chart = buildChart(days, start, d.Metric)
	p.Data = d
	return c.render(ec, http.StatusOK, "usage", p)
}

func metricValue(u store.UsageDay, metric string) float64 {
	switch metric {
	case "tokens":
		return float64(u.PromptTokens + u.CompletionTokens)
	case "credits":
		return float64(u.CreditsMicro) / 1e6
	}
	return float64(u.Requests)
}

func formatValue(v float64, metric string) string {
	if metric == "credits" {
		return fmt.Sprintf("%.4f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func buildChart(rows []store.UsageDay, start time.Time, metric string) chart {
	const w, h, left, bottom, top = 720, 240, 56, 28, 10
	ch := chart{Width: w, Height: h, Empty: true}
	var models []string
	idx := map[string]int{}
	for _, r := range rows {
		if _, ok := idx[r.Model]; !ok {
			idx[r.Model] = len(models)
			models = append(models, r.Model)
		}
	}
	for i, m := range models {
		ch.Models = append(ch.Models, chartModel{Name: m, Class: fmt.Sprintf("s%d", i%6)})
	}
	vals := make([][]float64, ChartDays)
	for i := range vals {
		vals[i] = make([]float64, len(models))
		ch.Days = append(ch.Days, start.AddDate(0, 0, i).Format("2006-01-02"))
	}
	dayIdx := map[string]int{}
	for i, d := range ch.Days {
		dayIdx[d] = i
	}
	for _, r := range rows {
		if i, ok := dayIdx[r.Day]; ok {
			vals[i][idx[r.Model]] += metricValue(r, metric)
		}
	}
	for _, v := range vals {
		sum := 0.0
		for _, x := range v {
			sum += x
		}
		ch.Max = max(ch.Max, sum)
	}
	if ch.Max > 0 {
		ch.Empty = false
	}
	scaleMax := niceMax(ch.Max, metric)
	plotH := float64(h - bottom - top)
	slot := float64(w-left) / ChartDays
	for i, v := range vals {
		y := float64(h - bottom)
		row := chartRow{Day: ch.Days[i]}
		total := 0.0
		for m, x := range v {
			row.Values = append(row.Values, formatValue(x, metric))
			total += x
			if x <= 0 {
				continue
			}
			bh := x / scaleMax * plotH
			y -= bh
			ch.Bars = append(ch.Bars, chartBar{X: float64(left) + float64(i)*slot + slot*0.15, Y: y, W: slot * 0.7, H: bh,
				Class: ch.Models[m].Class, Title: fmt.Sprintf("%s %s: %s", ch.Days[i], models[m], formatValue(x, metric))})
		}
		row.Total = formatValue(total, metric)
		ch.Labels = append(ch.Labels, chartLabel{X: float64(left) + float64(i)*slot + slot/2, Y: float64(h - 8), Label: ch.Days[i][5:]})
		ch.Rows = append(ch.Rows, row)
	}
	for i := 0; i <= 4; i++ {
		v := scaleMax * float64(i) / 4
		ch.Ticks = append(ch.Ticks, chartTick{Y: float64(h-bottom) - v/scaleMax*plotH, Label: formatValue(v, metric)})
	}
	return ch
}

// niceMax is the top of the chart's scale: ch.Max rounded up so that the
// four tick steps are whole numbers for counts.
func niceMax(v float64, metric string) float64 {
	if v <= 0 {
		return 4
	}
	if metric == "credits" {
		return v
	}
	step := math.Ceil(v / 4)
	return step * 4
}
