#!/usr/bin/env bash
# Shared pieces of the GPU-machine scripts (sourced, not run): what a carried bundle needs beside
# its binaries, and the synthetic checkpoint the forward benchmarks run on.

# The nine V4.1-Flash layers of the forward benchmarks' synthetic checkpoint: one of every layer
# role (deepinfer synth --layer-ids).
GPU_ROLES_LAYER_IDS=0,1,2,3,14,20,21,24,25

# copy_carry_libs DEST BINARY...: every shared library the binaries need beyond glibc,
# libstdc++/libgcc and the CUDA driver/runtime/cuBLAS (the GPU machine has none of the Debian
# -dev packages: fmt, spdlog, pcre2, the OpenMP runtime, ...).
copy_carry_libs() {
  local dest=$1 lib
  shift
  for lib in $(ldd "$@" 2>/dev/null | awk '/=> \// {print $3}' | sort -u |
               grep -vE '/(libc|libm|libpthread|libdl|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas|libcublasLt)\.so'); do
    cp -L "${lib}" "${dest}/"
  done
}

# copy_tiny_fixture DEST [FILE...]: the tiny golden fixture's files replay-fixture and
# cuda_forward_test read, plus any further FILEs of it (trace.safetensors: ~30 MB more).
copy_tiny_fixture() {
  local dest=$1 src=../shared/fixtures/v41-tiny-a f
  shift
  mkdir -p "${dest}"
  for f in cases.json cases.safetensors config.json engram_token_map.safetensors \
           inference_config.json model.safetensors "$@"; do
    cp "${src}/${f}" "${dest}/"
  done
}

# pack_out_logs DIR: the logs and reports in DIR (*.log, *.xml, *.txt) into one archive,
# DIR/logs.tar.xz, each cut to its first 4 MiB (a failing test can print whole vectors): the
# device tool returns at most 8 files a call. The scripts run it on exit (trap).
pack_out_logs() {
  local dir=$1 f files=()
  for f in "${dir}"/*.log "${dir}"/*.xml "${dir}"/*.txt; do
    [[ -f "${f}" ]] || continue
    if (($(stat -c %s "${f}") > 4194304)); then
      head -c 4194304 "${f}" > "${f}.cut" && mv "${f}.cut" "${f}"
      echo "[cut at 4 MiB]" >> "${f}"
    fi
    files+=("$(basename "${f}")")
  done
  if ((${#files[@]})); then
    tar -C "${dir}" -cJf "${dir}/logs.tar.xz" --remove-files "${files[@]}"
  fi
}

# ab_run_setup: the start of a script that runs an A/B bundle (gpu_ab_bundle.sh) on the GPU
# machine: the log folder ${OUT} (or ./gpu-out) in the global `out`, packed into one archive on
# exit; the bundle unpacked once; its carried libraries first on the library path.
ab_run_setup() {
  out=${OUT:-gpu-out}
  mkdir -p "${out}"
  trap 'pack_out_logs "${out}"' EXIT
  [[ -d .carry/ab ]] || tar -C .carry -xJf .carry/ab.tar.xz
  export LD_LIBRARY_PATH="$PWD/.carry/ab/lib:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# ncu_env: the library path of the Nsight Compute scripts (gpu_ncu.sh, gpu_ncu_stalls.sh): the
# bundle's libraries (GPU_LIB_DIR, default .carry/gpu/lib), then the CUDA and pip cuBLAS ones.
ncu_env() {
  local cuda_libs
  cuda_libs=$(ls -d /usr/local/cuda/lib64 2>/dev/null; python3 -c 'import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], "lib"))' 2>/dev/null)
  export LD_LIBRARY_PATH="$PWD/${GPU_LIB_DIR:-.carry/gpu/lib}:$(echo ${cuda_libs} | tr ' ' ':')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# ncu_source_page DIR NAME KERNEL_REGEX SKIP BINARY [ARGS...]: one launch of the kernels matching
# KERNEL_REGEX (after SKIP of them) in BINARY, under Nsight Compute with the source and warp-state
# sections; the stall samples per SASS instruction land in DIR/NAME_src_sass.txt (ncu's source
# page as CSV; the report itself is removed), the collection's output in DIR/NAME_src_collect.log.
# Uses the A/B bundle's libraries (.carry/ab/lib). NCU_SAMPLING_INTERVAL (0-31; unset: ncu's
# default): one warp-state sample every 2^(5 + value) cycles; 0 for kernels of a few µs (the
# batch-1 attention's default page held 94 samples).
ncu_source_page() {
  local dir=$1 name=$2 regex=$3 skip=$4
  shift 4
  (GPU_LIB_DIR=.carry/ab/lib ncu_env
   local sampling=()
   if [[ -n "${NCU_SAMPLING_INTERVAL:-}" ]]; then
     sampling=(--warp-sampling-interval "${NCU_SAMPLING_INTERVAL}")
   fi
   timeout 120 ncu --clock-control none "${sampling[@]}" -k "regex:${regex}" --launch-skip "${skip}" \
     --launch-count 1 --section SourceCounters --section WarpStateStats -o "${dir}/${name}_src" \
     "$@" > "${dir}/${name}_src_collect.log" 2>&1
   ncu -i "${dir}/${name}_src.ncu-rep" --page source --print-source sass --csv \
     > "${dir}/${name}_src_sass.txt" 2>&1
   rm -f "${dir}/${name}_src.ncu-rep") || echo "source page: see ${dir}/${name}_src_collect.log"
}
