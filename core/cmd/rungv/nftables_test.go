package main

import "testing"

func TestNFTablesFlag(t *testing.T) {
	cmd := newRunCommand(&globalFlags{})
	if cmd.Flags().Lookup("nftables") == nil {
		t.Fatal("rungv run has no --nftables flag")
	}
	for _, on := range []bool{false, true} {
		f := &runFlags{platform: "auto", nftables: nftablesFlag{on: on}, netRaw: true}
		cfg, err := f.sentryConfig()
		if err != nil {
			t.Fatal(err)
		}
		if cfg.NFTables != on {
			t.Errorf("--nftables=%v gives Config.NFTables %v", on, cfg.NFTables)
		}
		if !cfg.NetRaw {
			t.Errorf("--nftables=%v lost --net-raw", on)
		}
	}
	// --net-raw alone does not switch nftables on (see nftablesFlag).
	f := &runFlags{platform: "auto", netRaw: true}
	if cfg, _ := f.sentryConfig(); cfg.NFTables {
		t.Error("--net-raw alone switched nftables on")
	}
}
