# Every cell of the campaign (IMB and kernel cells), and the two views the analysis runs for.

CELL_IDS = [c.id for c in CELLS] + [c.id for c in KERNEL_CELLS]
ALL_CELL_DIRS = [layout.raw_dir(R, cell_id) for cell_id in CELL_IDS]
VIEWS = {"full": R, "partial": f"{R}/{layout.PARTIAL}"}
