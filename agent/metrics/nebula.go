package metrics

import (
	"fmt"
	"regexp"

	gometrics "github.com/rcrowley/go-metrics"

	"github.com/prometheus/client_golang/prometheus"
)

// nebulaCollector exports the counters and gauges Nebula keeps in its
// go-metrics registry (handshakes, hostmap sizes, lost and duplicate
// packets, cached packets, ...) as meshd_nebula_<name>, counters with
// _total. Nebula registers them in go-metrics' process-wide registry
// whether or not its own stats listener is configured (meshd never
// configures it: it would serve on http.DefaultServeMux and exit the
// process on a listen error); this collector only reads them. Histograms,
// meters and timers are left out. Their names vary with the host (one
// set of udp gauges per reader), so the collector is unchecked.
type nebulaCollector struct{ r gometrics.Registry }

var nebulaNameChars = regexp.MustCompile(`[^a-zA-Z0-9_]+`)

func nebulaMetricName(name string) string {
	return "meshd_nebula_" + nebulaNameChars.ReplaceAllString(name, "_")
}

func (nebulaCollector) Describe(chan<- *prometheus.Desc) {}

func (c nebulaCollector) Collect(ch chan<- prometheus.Metric) {
	c.r.Each(func(name string, i any) {
		var (
			typ  prometheus.ValueType
			v    float64
			full = nebulaMetricName(name)
		)
		switch m := i.(type) {
		case gometrics.Counter:
			typ, v, full = prometheus.CounterValue, float64(m.Count()), full+"_total"
		case gometrics.Gauge:
			typ, v = prometheus.GaugeValue, float64(m.Value())
		case gometrics.GaugeFloat64:
			typ, v = prometheus.GaugeValue, m.Value()
		default:
			return
		}
		desc := prometheus.NewDesc(full, fmt.Sprintf("Nebula's own %q (go-metrics).", name), nil, nil)
		ch <- prometheus.MustNewConstMetric(desc, typ, v)
	})
}
