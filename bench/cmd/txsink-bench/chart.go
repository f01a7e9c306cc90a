package main

import (
	"fmt"
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var palette = []color.Color{
	color.RGBA{0x44, 0x44, 0x44, 0xff}, // ceiling: grey
	color.RGBA{0x1f, 0x77, 0xb4, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff},
}

// writeCharts writes throughput.png (records/s by system and workload),
// latency_cdf.png, growth.png and the scale rows' scale_partitions.png,
// scale_connectors.png and scale_workers.png into dir, for what the report
// holds.
func writeCharts(rep *Report, dir string) error {
	if err := throughputChart(rep, filepath.Join(dir, "throughput.png")); err != nil {
		return err
	}
	if err := latencyChart(rep, filepath.Join(dir, "latency_cdf.png")); err != nil {
		return err
	}
	if err := growthChart(rep, filepath.Join(dir, "growth.png")); err != nil {
		return err
	}
	return scaleCharts(rep.Scale, dir)
}

func throughputChart(rep *Report, path string) error {
	var workloads []string
	seenW := map[string]bool{}
	type series struct {
		label string
		match func(*Row) bool
	}
	all := []series{
		{"raw COPY (best)", func(r *Row) bool { return r.System == "raw-copy" }},
		{"txsink exactly_once", func(r *Row) bool { return r.System == "txsink" && r.Mode == "exactly_once" }},
		{"txsink exactly_once_sink", func(r *Row) bool { return r.System == "txsink" && r.Mode == "exactly_once_sink" }},
		{"txsink at_least_once", func(r *Row) bool { return r.System == "txsink" && r.Mode == "at_least_once" }},
		{"Kafka Connect + Debezium JDBC", func(r *Row) bool { return r.System == "peer" }},
	}
	val := map[string]map[string]float64{} // series -> workload -> rps
	for _, r := range rep.Rows {
		if r.Skipped != "" || r.MedianRPS == 0 {
			continue
		}
		for _, s := range all {
			if !s.match(r) {
				continue
			}
			if !seenW[r.Workload] {
				seenW[r.Workload] = true
				workloads = append(workloads, r.Workload)
			}
			if val[s.label] == nil {
				val[s.label] = map[string]float64{}
			}
			val[s.label][r.Workload] = max(val[s.label][r.Workload], r.MedianRPS)
		}
	}
	if len(workloads) == 0 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Drain throughput by system and workload (median records/s)"
	p.Y.Label.Text = "thousand records/s"
	p.Legend.Top = true
	w := vg.Points(12)
	var present []series
	for _, s := range all {
		if val[s.label] != nil {
			present = append(present, s)
		}
	}
	for i, s := range present {
		vs := make(plotter.Values, len(workloads))
		for j, wl := range workloads {
			vs[j] = val[s.label][wl] / 1000
		}
		bars, err := plotter.NewBarChart(vs, w)
		if err != nil {
			return err
		}
		bars.LineStyle.Width = 0
		bars.Color = palette[i%len(palette)]
		bars.Offset = w * vg.Length(float64(i)-float64(len(present)-1)/2)
		p.Add(bars)
		p.Legend.Add(s.label, bars)
	}
	p.NominalX(workloads...)
	top := 0.0
	for _, m := range val {
		for _, v := range m {
			top = max(top, v/1000)
		}
	}
	p.Y.Min, p.Y.Max = 0, top*1.35 // room for the legend
	return p.Save(vg.Length(max(6, 2.2*float64(len(workloads))))*vg.Inch, 4.5*vg.Inch, path)
}

func latencyChart(rep *Report, path string) error {
	p := plot.New()
	p.Title.Text = "End-to-end latency CDF at half max throughput"
	p.X.Label.Text = "produce → row visible (ms)"
	p.Y.Label.Text = "fraction of records"
	p.Legend.Top = true
	p.Legend.Left = false
	n := 0
	for i, l := range rep.Latency {
		if l.Skipped != "" || len(l.CDF) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(l.CDF))
		for j, c := range l.CDF {
			pts[j].X, pts[j].Y = c[0], c[1]
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = palette[(i+1)%len(palette)]
		line.Width = vg.Points(2)
		p.Add(line)
		p.Legend.Add(fmt.Sprintf("%s @ %s rec/s (p99 %.0f ms)", l.Mode, fmtNum(l.OfferedRate), l.Quantiles.P99), line)
		n++
	}
	if n == 0 {
		return nil
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.X.Min = 0
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func growthChart(rep *Report, path string) error {
	var pts plotter.XYs
	for _, g := range rep.Growth {
		if g.Skipped == "" && g.Seconds > 0 {
			pts = append(pts, plotter.XY{X: float64(g.Records), Y: g.Seconds})
		}
	}
	if len(pts) < 2 {
		return nil
	}
	p := plot.New()
	p.Title.Text = "Growth: txsink exactly_once drain time (log-log; dashed = linear)"
	p.X.Label.Text = "records"
	p.Y.Label.Text = "seconds"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	line, points, err := plotter.NewLinePoints(pts)
	if err != nil {
		return err
	}
	line.Color, points.Color = palette[1], palette[1]
	p.Add(line, points)
	// The linear reference through the largest point.
	last := pts[len(pts)-1]
	ref := plotter.XYs{{X: pts[0].X, Y: last.Y * pts[0].X / last.X}, last}
	rl, err := plotter.NewLine(ref)
	if err != nil {
		return err
	}
	rl.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	rl.Color = palette[0]
	p.Add(rl)
	p.Add(plotter.NewGrid())
	return p.Save(6*vg.Inch, 4.5*vg.Inch, path)
}

// barSeries is one colour of a bar chart: a value per category (0: none).
type barSeries struct {
	label  string
	values []float64
}

// barChart draws grouped bars of series over categories, with a dashed
// horizontal reference line at ref (when > 0) labelled refLabel.
func barChart(path, title, ylabel string, categories []string, series []barSeries, ref float64, refLabel string) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	w := vg.Points(14)
	top := ref
	for i, s := range series {
		bars, err := plotter.NewBarChart(plotter.Values(s.values), w)
		if err != nil {
			return err
		}
		bars.LineStyle.Width = 0
		bars.Color = palette[(i+1)%len(palette)]
		bars.Offset = w * vg.Length(float64(i)-float64(len(series)-1)/2)
		p.Add(bars)
		p.Legend.Add(s.label, bars)
		for _, v := range s.values {
			top = max(top, v)
		}
	}
	if ref > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: ref}, {X: float64(len(categories)) - 0.5, Y: ref}})
		if err != nil {
			return err
		}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
		l.Color = palette[0]
		p.Add(l)
		p.Legend.Add(refLabel, l)
	}
	p.NominalX(categories...)
	p.Y.Min, p.Y.Max = 0, top*1.35
	return p.Save(vg.Length(max(6, 1.6*float64(len(categories))))*vg.Inch, 4.5*vg.Inch, path)
}

// scaleCharts draws the scale rows: records/s by partitions (with 80 % of
// the 6-partition rate), seconds to up and to recovered and RSS per
// connector by connectors (with the 30 s target), records/s by workers.
func scaleCharts(sc *Scale, dir string) error {
	if sc == nil {
		return nil
	}
	var cats []string
	var rps []float64
	var six float64
	for _, r := range sc.Partitions {
		if r.Skipped == "" && r.MedianRPS > 0 {
			cats = append(cats, fmt.Sprint(r.Partitions))
			rps = append(rps, r.MedianRPS/1000)
			if r.Partitions == 6 {
				six = r.MedianRPS / 1000
			}
		}
	}
	if len(cats) > 0 {
		if err := barChart(filepath.Join(dir, "scale_partitions.png"), "One connector: records/s by partitions ("+sc.Mode+")", "thousand records/s",
			cats, []barSeries{{"records/s", rps}}, 0.8*six, "80 % of 6 partitions (target)"); err != nil {
			return err
		}
	}
	cats = nil
	var up, rec, rss []float64
	for _, r := range sc.Connectors {
		if r.Skipped == "" && r.UpSeconds > 0 {
			cats = append(cats, fmt.Sprintf("%d × 6p", r.Connectors))
			up, rec, rss = append(up, r.UpSeconds), append(rec, r.RecoveredSeconds), append(rss, r.PeakRSSMB/100)
		}
	}
	if len(cats) > 0 {
		if err := barChart(filepath.Join(dir, "scale_connectors.png"), "Connectors on one worker ("+sc.Mode+")", "seconds; peak RSS in 100 MiB",
			cats, []barSeries{{"first create → up and steady (s)", up}, {"SIGKILL → recovered (s)", rec}, {"peak RSS (100 MiB)", rss}}, 30, "30 s target"); err != nil {
			return err
		}
	}
	cats, rps = nil, nil
	for _, r := range sc.Workers {
		if r.Skipped == "" && r.MedianRPS > 0 {
			cats = append(cats, fmt.Sprintf("%d worker(s)", r.Workers))
			rps = append(rps, r.MedianRPS/1000)
		}
	}
	if len(cats) > 0 {
		return barChart(filepath.Join(dir, "scale_workers.png"), "Cluster on one machine: one connector of 6 tasks ("+sc.Mode+")", "thousand records/s",
			cats, []barSeries{{"records/s", rps}}, 0, "")
	}
	return nil
}
