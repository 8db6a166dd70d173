package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Series is one latency distribution in a plot.
type Series struct {
	Label  string
	Points []Point
}

// palette is colour-blind friendly (Okabe–Ito, then Tol's).
var palette = []string{"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#882255", "#44AA99", "#999933", "#AA4499", "#661100"}

// Plot geometry, in SVG user units.
const (
	plotW, plotH            = 900, 520
	marginL, marginR        = 70, 20
	marginT, marginB        = 40, 50
	legendLine, legendWidth = 16, 330
)

// maxNines is the right end of the x axis: 99.999th percentile.
const maxNines = 5

// PercentilePlot renders latency against percentile in the style of
// HdrHistogram's plotter: x is log10(1/(1-q)), so 90%, 99%, 99.9%, ... are
// evenly spaced, and y is latency in ms on a log scale. The maximum (q=100)
// is left out: it has no place on that axis.
func PercentilePlot(title string, series []Series) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range series {
		for _, p := range s.Points {
			if p.Q >= 100 || p.Ms <= 0 {
				continue
			}
			lo, hi = math.Min(lo, p.Ms), math.Max(hi, p.Ms)
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.01, 1
	}
	yLo := math.Pow(10, math.Floor(math.Log10(lo)))
	yHi := math.Pow(10, math.Ceil(math.Log10(hi)))
	if yHi <= yLo {
		yHi = yLo * 10
	}
	height := max(plotH, marginT+8+legendLine*len(series)+10)
	innerW := float64(plotW - marginL - marginR - legendWidth)
	innerH := float64(plotH - marginT - marginB)
	x := func(q float64) float64 {
		n := math.Min(nines(q), maxNines)
		return float64(marginL) + n/maxNines*innerW
	}
	y := func(v float64) float64 {
		f := (math.Log10(v) - math.Log10(yLo)) / (math.Log10(yHi) - math.Log10(yLo))
		return float64(marginT) + (1-f)*innerH
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		plotW, height, plotW, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">%s</text>`+"\n", marginL, html.EscapeString(title))
	// Grid and axes.
	left, right := float64(marginL), float64(marginL)+innerW
	top, bottom := float64(marginT), float64(marginT)+innerH
	for n := 0; n <= maxNines; n++ {
		q := 100 * (1 - math.Pow(10, -float64(n)))
		xv := x(q)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", xv, top, xv, bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xv, bottom+16, pctLabel(n))
	}
	for d := yLo; d <= yHi*1.0001; d *= 10 {
		for _, m := range []float64{1, 2, 5} {
			v := d * m
			if v > yHi*1.0001 {
				break
			}
			yv := y(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
			}
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", left, yv, right, yv, stroke)
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, yv+4, msLabel(v))
		}
	}
	fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", left, top, innerW, innerH)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">percentile</text>`+"\n", left+innerW/2, bottom+36)
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">latency (ms, log scale)</text>`+"\n", top+innerH/2)
	// Series.
	for i, s := range series {
		color := palette[i%len(palette)]
		dash := ""
		if i >= len(palette) {
			dash = ` stroke-dasharray="6 3"`
		}
		var pts []string
		for _, p := range s.Points {
			if p.Q >= 100 || p.Ms <= 0 {
				continue
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.Q), y(p.Ms)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", color, dash, strings.Join(pts, " "))
		ly := float64(marginT + 8 + i*legendLine)
		lx := right + 16
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"%s/>`+"\n", lx, ly, lx+22, ly, color, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+28, ly+4, html.EscapeString(s.Label))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// nines is log10(1/(1-q/100)): 0 at 0%, 1 at 90%, 2 at 99%, ...
func nines(q float64) float64 {
	if q >= 100 {
		return maxNines
	}
	return -math.Log10(1 - q/100)
}

func pctLabel(n int) string {
	switch n {
	case 0:
		return "0%"
	case 1:
		return "90%"
	case 2:
		return "99%"
	default:
		return "99." + strings.Repeat("9", n-2) + "%"
	}
}

func msLabel(v float64) string {
	switch {
	case v >= 1:
		return fmt.Sprintf("%g", math.Round(v*1000)/1000)
	default:
		return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", v), "0"), ".")
	}
}
