"""Fig. 2 (trains, cached), then Figs. 3, 4, Apps. G, H from the same cached run, one process."""
import importlib
import sys
import time

argv = sys.argv[1:]
for a in ("fig2", "fig3", "fig4", "appG", "appH"):
    t = time.time()
    try:
        importlib.import_module(f"reproduce.gnrev_{a}").main(argv)
    except SystemExit as e:
        print(f"views: {a} exit {e.code}", flush=True)
    print(f"views: {a} done in {time.time() - t:.1f} s", flush=True)
