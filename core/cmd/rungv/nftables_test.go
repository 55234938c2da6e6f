package main

import "testing"

func TestNFTablesFlag(t *testing.T) {
	cmd := newRunCommand(&globalFlags{})
	if cmd.Flags().Lookup("nftables") == nil {
		t.Fatal("rungv run has no --nftables flag")
	}
	for args, on := range map[string]bool{"--nftables=false": false, "--nftables": true} {
		sp, _, err := parseRun(t, args, "--net-raw", "img")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := sentryConfig(&sp)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.NFTables != on {
			t.Errorf("%s gives Config.NFTables %v", args, cfg.NFTables)
		}
		if !cfg.NetRaw {
			t.Errorf("%s lost --net-raw", args)
		}
	}
	// --net-raw alone does not switch nftables on (see addNFTablesFlag).
	sp, _, _ := parseRun(t, "--net-raw", "img")
	if cfg, _ := sentryConfig(&sp); cfg.NFTables {
		t.Error("--net-raw alone switched nftables on")
	}
}
