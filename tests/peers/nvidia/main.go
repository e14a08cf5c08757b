// Command nvidia-dp-config loads device plugin config files with NVIDIA's own config package
// (github.com/NVIDIA/k8s-device-plugin/api/config/v1, pinned in go.mod) the way NVIDIA's
// nvidia-device-plugin does at start: its command-line flags with their defaults and
// environment variables, the config file, resource naming turned off, then the checks it makes
// before touching a GPU. It prints one JSON
// object per file on stdout: {"file": F, "config": <the config the plugin would run with>} or
// {"file": F, "error": "<why NVIDIA's plugin would refuse to start>"}.
//
// gpuchain's tests run it as a peer: each file is given to both parsers and the outcomes compared.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	spec "github.com/NVIDIA/k8s-device-plugin/api/config/v1"
	"github.com/urfave/cli/v2"
)

// pluginFlags are the nvidia-device-plugin flags that feed its config: names, aliases, defaults
// and environment variables as the pinned release declares them.
func pluginFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "mig-strategy", Value: spec.MigStrategyNone, EnvVars: []string{"MIG_STRATEGY"}},
		&cli.BoolFlag{Name: "fail-on-init-error", Value: true, EnvVars: []string{"FAIL_ON_INIT_ERROR"}},
		&cli.StringFlag{Name: "driver-root", Aliases: []string{"nvidia-driver-root"}, Value: "/", EnvVars: []string{"NVIDIA_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "dev-root", Aliases: []string{"nvidia-dev-root"}, EnvVars: []string{"NVIDIA_DEV_ROOT"}},
		&cli.BoolFlag{Name: "pass-device-specs", EnvVars: []string{"PASS_DEVICE_SPECS"}},
		&cli.StringSliceFlag{Name: "device-list-strategy", Value: cli.NewStringSlice(spec.DeviceListStrategyEnvVar), EnvVars: []string{"DEVICE_LIST_STRATEGY"}},
		&cli.StringFlag{Name: "device-id-strategy", Value: spec.DeviceIDStrategyUUID, EnvVars: []string{"DEVICE_ID_STRATEGY"}},
		&cli.BoolFlag{Name: "gdrcopy-enabled", EnvVars: []string{"GDRCOPY_ENABLED"}},
		&cli.BoolFlag{Name: "gds-enabled", EnvVars: []string{"GDS_ENABLED"}},
		&cli.BoolFlag{Name: "mofed-enabled", EnvVars: []string{"MOFED_ENABLED"}},
		&cli.StringFlag{Name: "config-file", EnvVars: []string{"CONFIG_FILE"}},
		&cli.StringFlag{Name: "cdi-annotation-prefix", Value: spec.DefaultCDIAnnotationPrefix, EnvVars: []string{"CDI_ANNOTATION_PREFIX"}},
		&cli.StringFlag{Name: "nvidia-cdi-hook-path", Aliases: []string{"nvidia-ctk-path"}, Value: spec.DefaultNvidiaCTKPath, EnvVars: []string{"NVIDIA_CDI_HOOK_PATH", "NVIDIA_CTK_PATH"}},
		&cli.StringFlag{Name: "driver-root-ctr-path", Aliases: []string{"container-driver-root"}, Value: spec.DefaultContainerDriverRoot, EnvVars: []string{"DRIVER_ROOT_CTR_PATH", "CONTAINER_DRIVER_ROOT"}},
		&cli.StringFlag{Name: "mps-root", EnvVars: []string{"MPS_ROOT"}},
		&cli.StringFlag{Name: "device-discovery-strategy", Value: "auto", EnvVars: []string{"DEVICE_DISCOVERY_STRATEGY"}},
		&cli.IntSliceFlag{Name: "imex-channel-ids", EnvVars: []string{"IMEX_CHANNEL_IDS"}},
		&cli.BoolFlag{Name: "imex-required", EnvVars: []string{"IMEX_REQUIRED"}},
	}
}

type result struct {
	File   string       `json:"file"`
	Config *spec.Config `json:"config,omitempty"`
	Error  string       `json:"error,omitempty"`
}

// startChecks are the checks nvidia-device-plugin makes on its config before it touches a GPU
// (its validateFlags), on a node where NVML is present: the same conditions and messages, over
// the config package's own helpers.
func startChecks(config *spec.Config) error {
	if _, err := spec.NewDeviceListStrategies(*config.Flags.Plugin.DeviceListStrategy); err != nil {
		return fmt.Errorf("invalid --device-list-strategy option: %v", err)
	}
	if id := *config.Flags.Plugin.DeviceIDStrategy; id != spec.DeviceIDStrategyUUID && id != spec.DeviceIDStrategyIndex {
		return fmt.Errorf("invalid --device-id-strategy option: %v", id)
	}
	if config.Sharing.SharingStrategy() == spec.SharingStrategyMPS {
		if *config.Flags.MigStrategy == spec.MigStrategyMixed {
			return fmt.Errorf("using --mig-strategy=mixed is not supported with MPS")
		}
		if config.Flags.MpsRoot == nil || *config.Flags.MpsRoot == "" {
			return fmt.Errorf("using MPS requires --mps-root to be specified")
		}
	}
	switch *config.Flags.DeviceDiscoveryStrategy {
	case "auto", "nvml", "tegra":
	default:
		return fmt.Errorf("invalid --device-discovery-strategy option %v", *config.Flags.DeviceDiscoveryStrategy)
	}
	switch *config.Flags.MigStrategy {
	case spec.MigStrategyNone, spec.MigStrategySingle, spec.MigStrategyMixed:
	default:
		return fmt.Errorf("unknown MIG strategy: %v", *config.Flags.MigStrategy)
	}
	if err := spec.AssertChannelIDsValid(config.Imex.ChannelIDs); err != nil {
		return fmt.Errorf("invalid IMEX channel IDs: %w", err)
	}
	return nil
}

// load runs the plugin's start-up config path on one file.
func load(file string) result {
	out := result{File: file}
	// Usage text goes to stderr: stdout carries only the JSON lines.
	app := &cli.App{Name: "nvidia-device-plugin", Flags: pluginFlags(), Writer: os.Stderr, ErrWriter: os.Stderr}
	app.Action = func(c *cli.Context) error {
		config, err := spec.NewConfig(c, app.Flags)
		if err != nil {
			return fmt.Errorf("unable to finalize config: %v", err)
		}
		config.Flags.GFD = nil
		spec.DisableResourceNamingInConfig(config)
		if err := startChecks(config); err != nil {
			return err
		}
		out.Config = config
		return nil
	}
	if err := app.Run([]string{"nvidia-device-plugin", "--config-file", file}); err != nil {
		out.Error = err.Error()
		out.Config = nil
	}
	return out
}

func main() {
	enc := json.NewEncoder(os.Stdout)
	for _, file := range os.Args[1:] {
		if err := enc.Encode(load(file)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}
