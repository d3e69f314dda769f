# Apptainer images of the MPI stacks (hybrid model: host launcher + `apptainer exec` per rank).
#
#   containers/<stack>.def (package data) --(image_def)--> results/images/<stack>.def --(image)--> results/images/<stack>.sif
#                                                                               + results/images/<stack>.inspect.json
#
# Config block (read as config["containers"]; every key optional, defaults shown):
#
#   containers:
#     enabled: false                  # true: container_image_targets() lists every image below
#     bootstrap: debootstrap          # debootstrap (Debian mirror) | docker (needs a registry: docker_from)
#     os_version: bookworm            # Debian suite of the image (debootstrap)
#     mirror_url: (the Debian mirror the host's apt sources name; mpiatlas.stacks.apt_sources)
#     docker_from: debian:bookworm    # base image when bootstrap: docker
#     impi_version: 2021.16.1         # impi-rt/impi-devel (Intel MPI image; IMB binaries of the MPICH image)
#     imb_version: "2021.10"          # the IMB release (label; the impi-rt wheel ships 2021.10)
#     images_dir: results/images
#     stacks:                         # which images exist; keys: openmpi | mpich | intelmpi
#       openmpi:
#         mpi_version: 4.1.4          # %post refuses another version (host mpirun.openmpi must match)
#         imb: skip                   # build: compile IMB from imb_url (needs imb_sha256) | skip: kernels only,
#                                     #   label mpiatlas.imb="unavailable: IMB source not reachable at build time"
#         imb_url: https://github.com/intel/mpi-benchmarks/archive/refs/tags/IMB-v2021.10.tar.gz
#         imb_sha256: ""              # TO FILL IN (sha256 of that tarball; unreachable from this network)
#       mpich:
#         mpi_version: 4.0.2
#         imb: build                  # IMB binaries of the impi-rt wheel through the MPICH ABI
#       intelmpi:
#         mpi_version: 2021.16.1
#         imb: build                  # IMB-MPI1 of impi-rt
#
# With imb: build and an unreachable imb_url the Open MPI build FAILS with "IMB source not
# reachable: <url>; set imb: skip for this stack to build without IMB"; with an empty imb_sha256
# it fails after the download, printing the tarball's sha256 to pin.
#
# Build command (mpiatlas.stacks.containers.build_command), as plain root (no --fakeroot):
#   apptainer build --force --mksquashfs-args "-comp zstd -Xcompression-level 3" <sif> <def>
# Serialise builds with `--resources apptainer_build=1` (each takes ~1-2 min and a core or two).
# Campaign cells do NOT use Snakemake's `container:` directive (that would wrap the launcher
# too): they run `<host launcher> apptainer exec <sif> <program>` (mpiatlas.stacks.containers.exec_argv).

# IMAGES_CONFIG, IMAGES_DIR, container_image_targets() and image_render_json are in rules/common.smk.


rule image_def:
    input:
        template=f"{IMAGE_TEMPLATES_DIR}/{{stack}}.def",
    output:
        f"{IMAGES_DIR}/{{stack}}.def",
    params:
        render_json=image_render_json,
    log:
        "results/logs/images/{stack}.render.log",
    conda:
        "../envs/mpiatlas.yaml"
    wildcard_constraints:
        stack="openmpi|mpich|intelmpi",
    localrule: True
    shell:
        "mpiatlas image render {wildcards.stack} --params-json {params.render_json:q}"
        " --template {input.template:q} --out {output:q} > {log:q} 2>&1"


rule image:
    input:
        deffile=f"{IMAGES_DIR}/{{stack}}.def",
        kernels=KERNEL_SOURCES,
    output:
        sif=f"{IMAGES_DIR}/{{stack}}.sif",
        inspect=f"{IMAGES_DIR}/{{stack}}.inspect.json",
    params:
        # Not used by the command: a change of any rendering value rebuilds the image.
        versions=image_render_json,
        kernels_dir=lambda wildcards, input: os.path.dirname(input.kernels[0]),
    log:
        "results/logs/images/{stack}.build.log",
    conda:
        "../envs/mpiatlas.yaml"
    wildcard_constraints:
        stack="openmpi|mpich|intelmpi",
    resources:
        apptainer_build=1,
    # Images before cells, like stack installs and kernel builds (rules/stacks.smk).
    priority: 100
    localrule: True
    shell:
        "mpiatlas image build {input.deffile:q} {output.sif:q} --log {log:q} --inspect {output.inspect:q}"
        " --kernels {params.kernels_dir:q}"


rule image_preflight:
    # Before any cell uses an image: labels name the host's MPI kind and version, and a real
    # 2-rank hybrid hello forms one job (not N copies of rank 0).
    input:
        sif=lambda wc: cell_model.container_spec(CAMPAIGN, wc.stack)["image"],
        stack=lambda wc: stack_record(wc.stack),
    output:
        f"{IMAGES_DIR}/{{stack}}.preflight.txt",
    params:
        kind=lambda wc: CAMPAIGN.stacks[wc.stack].kind,
        source=lambda wc: CAMPAIGN.stacks[wc.stack].source,
        prefix=lambda wc: cell_model.stack_prefix(CAMPAIGN, wc.stack),
    log:
        "results/logs/images/{stack}.preflight.log",
    conda:
        "../envs/mpiatlas.yaml"
    priority: 100
    shell:
        "mpiatlas image preflight {input.sif:q} --host-kind {params.kind:q} --host-source {params.source:q}"
        " --host-prefix {params.prefix:q} > {output:q} 2> {log:q}"
