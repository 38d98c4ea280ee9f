// otelcol: the OpenTelemetry Collector distribution of dco's tests (tests/tests/observability_tracing.rs):
// the OTLP receiver, the batch processor and the file exporter, nothing else. It is what the
// collector's builder (ocb) would generate from a manifest listing those three, written out so
// `hack/testenv tool otelcol` can build it with plain `go build` (hack/testenv, build_tool).
package main

import (
	"log"
	"runtime/debug"

	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/fileexporter"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/provider/fileprovider"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/otelcol"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/otlpreceiver"
	"go.opentelemetry.io/collector/service/telemetry/otelconftelemetry"
)

func main() {
	info := component.BuildInfo{
		Command:     "otelcol",
		Description: "OpenTelemetry Collector for dco's tests (OTLP receiver, batch processor, file exporter)",
		Version:     collectorVersion(),
	}
	set := otelcol.CollectorSettings{
		BuildInfo: info,
		Factories: components,
		ConfigProviderSettings: otelcol.ConfigProviderSettings{
			ResolverSettings: confmap.ResolverSettings{
				// --config=FILE only: the tests write the config file.
				ProviderFactories: []confmap.ProviderFactory{fileprovider.NewFactory()},
				DefaultScheme:     "file",
			},
		},
	}
	if err := otelcol.NewCommand(set).Execute(); err != nil {
		log.Fatalf("collector: %v", err)
	}
}

func components() (otelcol.Factories, error) {
	var f otelcol.Factories
	var err error
	if f.Receivers, err = otelcol.MakeFactoryMap[receiver.Factory](otlpreceiver.NewFactory()); err != nil {
		return f, err
	}
	if f.Processors, err = otelcol.MakeFactoryMap[processor.Factory](batchprocessor.NewFactory()); err != nil {
		return f, err
	}
	if f.Exporters, err = otelcol.MakeFactoryMap[exporter.Factory](fileexporter.NewFactory()); err != nil {
		return f, err
	}
	// The collector refuses to start without a telemetry factory (otelcol/unmarshaler.go):
	// this one gives it its own logs on stderr.
	f.Telemetry = otelconftelemetry.NewFactory()
	return f, nil
}

// collectorVersion is the version of the otelcol module this binary was built with (go.mod),
// so `otelcol --version` cannot disagree with what was built.
func collectorVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "go.opentelemetry.io/collector/otelcol" {
				return m.Version
			}
		}
	}
	return "unknown"
}
