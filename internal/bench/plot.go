package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// A figure is one or more panels side by side, each with axes, labels and
// a legend, drawn on a canvas: SVG text or a PNG raster. Coordinates are in
// points, y downwards; a PNG draws each point as pngScale pixels.

// Panel geometry, in points.
const (
	panelWidth   = 420.0
	panelHeight  = 300.0
	marginLeft   = 62.0
	marginRight  = 16.0
	marginTop    = 26.0
	marginBottom = 40.0
	figTitleH    = 22.0
	legendRowH   = 14.0
	legendSwatch = 14.0
	// charWidth and textHeight are the size of one character of the
	// monospace text both canvases draw.
	charWidth  = 6.0
	textHeight = 9.0
)

// panelKind is how a panel draws its data.
type panelKind int

const (
	// linesPanel draws each line's points joined, over a numeric x axis.
	linesPanel panelKind = iota
	// barsPanel draws, for each category, one bar per series side by
	// side or, stacked, one bar of all series.
	barsPanel
)

type figure struct {
	title string
	// note, when set, is a second line under the title (a time series'
	// events).
	note   string
	panels []panel
}

type panel struct {
	title, xLabel, yLabel string
	kind                  panelKind
	lines                 []plotLine
	cats                  []string
	bars                  []barSeries
	stacked               bool
	marks                 []plotMark
}

// plotLine is one series of a lines panel; NaN y values break the line.
type plotLine struct {
	name   string
	xs, ys []float64
	dots   bool
	dashed bool
}

// barSeries is one series of a bars panel: one value per category (NaN:
// no bar).
type barSeries struct {
	name string
	vals []float64
}

// plotMark is a vertical line at x with a short label (an event).
type plotMark struct {
	x     float64
	label string
}

// palette holds the series colours, in order.
var palette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, // blue
	{0xd6, 0x27, 0x28, 0xff}, // red
	{0x2c, 0xa0, 0x2c, 0xff}, // green
	{0xff, 0x7f, 0x0e, 0xff}, // orange
	{0x94, 0x67, 0xbd, 0xff}, // purple
	{0x8c, 0x56, 0x4b, 0xff}, // brown
	{0x17, 0xbe, 0xcf, 0xff}, // cyan
	{0x7f, 0x7f, 0x7f, 0xff}, // grey
}

var (
	black     = color.RGBA{0, 0, 0, 0xff}
	gridGrey  = color.RGBA{0xe4, 0xe4, 0xe4, 0xff}
	markGrey  = color.RGBA{0x70, 0x70, 0x70, 0xff}
	textGrey  = color.RGBA{0x40, 0x40, 0x40, 0xff}
	white     = color.RGBA{0xff, 0xff, 0xff, 0xff}
	seriesCol = func(i int) color.RGBA { return palette[i%len(palette)] }
)

// anchor is where a text's x is: its start, middle or end.
type anchor int

const (
	anchorStart anchor = iota
	anchorMiddle
	anchorEnd
)

// canvas is what a figure is drawn on. y grows downwards; a text's y is
// its vertical middle.
type canvas interface {
	line(x1, y1, x2, y2 float64, c color.RGBA, width float64, dashed bool)
	rect(x, y, w, h float64, c color.RGBA)
	dot(x, y, r float64, c color.RGBA)
	// text draws s; vertical text reads bottom to top, centred on (x, y).
	text(x, y float64, s string, c color.RGBA, a anchor, vertical bool)
}

// size is the figure's width and height in points.
func (f *figure) size() (w, h float64) {
	return panelWidth * float64(max(len(f.panels), 1)), f.headerHeight() + panelHeight
}

func (f *figure) headerHeight() float64 {
	if f.note != "" {
		return figTitleH + legendRowH
	}
	return figTitleH
}

// draw draws f on c.
func (f *figure) draw(c canvas) {
	w, _ := f.size()
	c.text(w/2, figTitleH/2+2, fitText(f.title, w-8), black, anchorMiddle, false)
	if f.note != "" {
		c.text(w/2, figTitleH+legendRowH/2, fitText(f.note, w-8), markGrey, anchorMiddle, false)
	}
	for i := range f.panels {
		f.panels[i].draw(c, panelWidth*float64(i), f.headerHeight())
	}
}

// legendNames lists the names a panel's legend shows.
func (p *panel) legendNames() []string {
	var names []string
	if p.kind == barsPanel {
		for _, b := range p.bars {
			names = append(names, b.name)
		}
	} else {
		for _, l := range p.lines {
			names = append(names, l.name)
		}
	}
	return names
}

// legendRows lays the legend entries out in rows that fit width, each
// entry's x offset within its row.
func legendRows(names []string, width float64) [][]struct {
	i int
	x float64
} {
	type entry = struct {
		i int
		x float64
	}
	var rows [][]entry
	var row []entry
	x := 0.0
	for i, n := range names {
		ew := legendSwatch + 4 + charWidth*float64(len([]rune(n))) + 12
		if len(row) > 0 && x+ew > width {
			rows = append(rows, row)
			row, x = nil, 0
		}
		row = append(row, entry{i, x})
		x += ew
	}
	if len(row) > 0 {
		rows = append(rows, row)
	}
	return rows
}

// draw draws the panel with its top-left corner at (ox, oy).
func (p *panel) draw(c canvas, ox, oy float64) {
	names := p.legendNames()
	plotW := panelWidth - marginLeft - marginRight
	rows := legendRows(names, plotW)
	top := oy + marginTop + legendRowH*float64(len(rows))
	left := ox + marginLeft
	bottom := oy + panelHeight - marginBottom
	plotH := bottom - top
	c.text(left+plotW/2, oy+marginTop/2+2, fitText(p.title, plotW), black, anchorMiddle, false)
	for r, row := range rows {
		y := oy + marginTop + legendRowH*float64(r) + legendRowH/2
		for _, e := range row {
			x := left + e.x
			col := seriesCol(e.i)
			if p.kind == barsPanel {
				c.rect(x, y-4, legendSwatch, 8, col)
			} else {
				c.line(x, y, x+legendSwatch, y, col, 2, p.lines[e.i].dashed)
			}
			c.text(x+legendSwatch+4, y, names[e.i], textGrey, anchorStart, false)
		}
	}

	// Axes ranges.
	var xMin, xMax, yMax float64
	yMin := 0.0
	switch p.kind {
	case barsPanel:
		xMin, xMax = 0, float64(max(len(p.cats), 1))
		for ci := range p.cats {
			sum := 0.0
			for _, b := range p.bars {
				if v := b.vals[ci]; !math.IsNaN(v) {
					if p.stacked {
						sum += v
					} else {
						yMax = math.Max(yMax, v)
					}
				}
			}
			yMax = math.Max(yMax, sum)
		}
	default:
		xMin, xMax = math.Inf(1), math.Inf(-1)
		for _, l := range p.lines {
			for i, x := range l.xs {
				if math.IsNaN(l.ys[i]) {
					continue
				}
				xMin, xMax = math.Min(xMin, x), math.Max(xMax, x)
				yMax = math.Max(yMax, l.ys[i])
			}
		}
		for _, m := range p.marks {
			xMin, xMax = math.Min(xMin, m.x), math.Max(xMax, m.x)
		}
		if math.IsInf(xMin, 0) {
			xMin, xMax = 0, 1
		}
	}
	yTicks := niceTicks(yMin, yMax)
	yMax = yTicks[len(yTicks)-1]
	var xTicks []float64
	if p.kind == linesPanel {
		xTicks = niceTicks(xMin, xMax)
		xMin, xMax = xTicks[0], xTicks[len(xTicks)-1]
	}
	px := func(x float64) float64 { return left + (x-xMin)/(xMax-xMin)*plotW }
	py := func(y float64) float64 { return bottom - (y-yMin)/(yMax-yMin)*plotH }

	// Grid and ticks.
	for _, t := range yTicks {
		y := py(t)
		c.line(left, y, left+plotW, y, gridGrey, 1, false)
		c.text(left-4, y, formatTick(t), textGrey, anchorEnd, false)
	}
	if p.kind == linesPanel {
		for _, t := range xTicks {
			x := px(t)
			c.line(x, bottom, x, bottom+4, black, 1, false)
			c.text(x, bottom+11, formatTick(t), textGrey, anchorMiddle, false)
		}
	}
	c.text(left+plotW/2, bottom+29, p.xLabel, black, anchorMiddle, false)
	c.text(ox+12, top+plotH/2, p.yLabel, black, anchorMiddle, true)

	// Data.
	switch p.kind {
	case barsPanel:
		slot := plotW / float64(max(len(p.cats), 1))
		n := len(p.bars)
		if p.stacked {
			n = 1
		}
		bw := slot * 0.8 / float64(max(n, 1))
		for ci, cat := range p.cats {
			x0 := left + slot*float64(ci) + slot*0.1
			acc := 0.0
			for bi, b := range p.bars {
				v := b.vals[ci]
				if math.IsNaN(v) {
					continue
				}
				if p.stacked {
					c.rect(x0, py(acc+v), bw, py(acc)-py(acc+v), seriesCol(bi))
					acc += v
				} else {
					x := x0 + bw*float64(bi)
					c.rect(x, py(v), bw, bottom-py(v), seriesCol(bi))
				}
			}
			// A category label may have two lines.
			for li, line := range strings.SplitN(cat, "\n", 2) {
				c.text(left+slot*(float64(ci)+0.5), bottom+11+float64(li)*(textHeight+2), fitText(line, slot-charWidth), textGrey, anchorMiddle, false)
			}
		}
	default:
		for li, l := range p.lines {
			col := seriesCol(li)
			havePrev := false
			var x0, y0 float64
			for i, x := range l.xs {
				y := l.ys[i]
				if math.IsNaN(y) {
					havePrev = false
					continue
				}
				x1, y1 := px(x), py(y)
				if havePrev {
					c.line(x0, y0, x1, y1, col, 1.5, l.dashed)
				}
				if l.dots {
					c.dot(x1, y1, 2.5, col)
				}
				x0, y0, havePrev = x1, y1, true
			}
		}
		for i, m := range p.marks {
			x := px(m.x)
			c.line(x, top, x, bottom, markGrey, 1, true)
			// Stagger the labels so that neighbours do not overlap.
			c.text(x+3, top+6+textHeight*1.2*float64(i%4), m.label, markGrey, anchorStart, false)
		}
	}
	c.line(left, top, left, bottom, black, 1, false)
	c.line(left, bottom, left+plotW, bottom, black, 1, false)
}

// fitText shortens s to fit width points.
func fitText(s string, width float64) string {
	r := []rune(s)
	n := int(width / charWidth)
	if len(r) <= n || n < 2 {
		return s
	}
	return string(r[:n-1]) + "~"
}

// niceTicks returns 4–8 round tick values covering [lo, hi].
func niceTicks(lo, hi float64) []float64 {
	if !(hi > lo) {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	// Round ticks to the step's decimals, away from floating-point dust
	// (0.30000000000000004).
	digits := max(0, 1-int(math.Floor(math.Log10(step))))
	first := math.Floor(lo / step)
	var out []float64
	for i := 0.0; ; i++ {
		v := round((first+i)*step, digits)
		out = append(out, v)
		if v >= hi-step*1e-9 {
			break
		}
	}
	return out
}

// formatTick prints a tick value compactly: 0.5, 12, 2.5k, 1.2M.
func formatTick(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'g', 4, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'g', 4, 64) + "k"
	default:
		return strconv.FormatFloat(v, 'g', 4, 64)
	}
}

// writeFigure writes f to path as SVG or PNG, by its extension.
func writeFigure(path string, f *figure) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := encodeFigure(file, strings.ToLower(filepath.Ext(path)), f); err != nil {
		file.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return file.Close()
}

// encodeFigure writes f in the format of ext (".svg" or ".png").
func encodeFigure(w io.Writer, ext string, f *figure) error {
	switch ext {
	case ".svg":
		return writeSVG(w, f)
	case ".png":
		return writePNG(w, f)
	}
	return fmt.Errorf("unknown plot format %q", ext)
}

// CheckPlotPath rejects a --plot file whose format is not known.
func CheckPlotPath(path string) error {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".svg", ".png":
		return nil
	}
	return fmt.Errorf("--plot must name a .png or .svg file, got %q", path)
}
