"""Shared test setup: Hypothesis profiles (``ci``: 200 examples; ``dev``: 30; ``fuzz``: 5,000)."""

import os
import warnings

from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=200, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=30, deadline=None)
# the hostile-spec fuzzer at scale: ``python -m pytest tests/package/test_fuzz.py
# --hypothesis-profile=fuzz`` (5,000 specs per command; EXACTATTN_FUZZ_EXAMPLES=N for N)
settings.register_profile("fuzz", max_examples=int(os.environ.get("EXACTATTN_FUZZ_EXAMPLES", 5000)),
                          deadline=None, derandomize=False,
                          suppress_health_check=list(HealthCheck))
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE",
                                     "ci" if os.environ.get("CI") else "dev"))


import pytest  # noqa: E402

# Tests that take about a second or more, marked ``slow``: the plain ``python -m pytest``
# (pyproject's addopts: ``-m "not slow" -n auto``) leaves them out, ``python -m pytest -m
# slow`` runs them (``.ci/run`` runs both).  Measured with ``python -m pytest -q --durations=0`` (dev profile, no
# CI) on a 2-core machine, twice: every test whose call took >= 0.9 s in both runs.
# An entry is a node id (relative to the repository root); an entry without ``[...]``
# matches every parametrization of that test.  Remeasure and update when tests change;
# an entry that matches nothing in a collected file is reported as a warning.
# (tests/package/test_docs_examples.py marks its own tests slow.)
SLOW_TESTS = [
    "tests/checks/test_blocks_dask.py::test_one_worker_two_workers_and_this_process_give_the_same_strings",
    "tests/checks/test_blocks_dask.py::test_a_worker_killed_mid_run_changes_nothing",
    "tests/checks/test_blocks_dask.py::test_the_scheduler_address_comes_from_the_environment",
    "tests/checks/test_blocks_dask.py::test_a_blocked_check_on_two_workers_matches_this_process",
    "tests/checks/test_blocks_dask.py::test_the_command_sends_blocks_to_a_cluster",
    "tests/audit/test_model_run.py::test_all_minilm_l6_v2_every_head_of_every_layer",  # 23-33 s
    "tests/audit/test_model_run.py::test_gpt2_tiny_eager_every_entry_certified_and_compared",  # ~5 s
    "tests/audit/test_model_run.py::test_check_command_text_and_json",  # 1.5-2.6 s
    "tests/checks/test_gradients_verify.py::test_backward_search_finds_and_shrinks_a_wrong_backward",  # ~3 s
    "tests/reference/test_gradients_modifiers.py::test_sink_gradients_and_dsink_equal_sympy",  # ~2.5 s
    "tests/reference/test_gradients_modifiers.py::"
    "test_an_irrational_slope_beside_another_irrational_scale_needs_two_generators",  # ~1.5 s
    "tests/reference/test_gradients_modifiers.py::test_alibi_gradients_equal_sympy",  # ~1.4 s
    "tests/reference/test_gradients_modifiers.py::test_dropout_gradients_equal_sympy",  # ~1.4 s
    "tests/package/test_owners.py::test_sdpa_arguments_are_the_audits",  # ~1.7 s (imports torch)
    "tests/checks/test_verify_modifiers.py::test_sink_case_right_and_faulty",  # ~1.4 s (imports torch)
    "tests/cost/test_cost_audit.py::test_installed_counter_on_the_verified_cases",  # 3-8 s per counter
    "tests/cost/test_cost_audit.py::test_audit_with_torch_names_the_verified_cases",  # ~17 s
    "tests/reference/test_gradients.py::test_sympy_diff_of_the_symbolic_engine_equals_the_weight_gradients",  # 2-8 s
    "tests/checks/test_gradients_verify.py::test_torch_autograd_passes_for_every_dtype_with_gqa_and_a_mask",  # 7 s
    "tests/checks/test_gradients_verify.py::test_cli_backward_torch_all_dtypes",  # ~1.3 s
    "tests/present/test_page.py::test_length_stops_are_counted_or_derived_and_exact",  # ~1.4 s
    "tests/present/test_page.py::test_a_spec_with_two_numbers_per_token",  # ~1.2 s
    "tests/present/test_page.py::test_the_command_writes_the_page",  # ~1.5 s
    "tests/present/test_page.py::test_digits_and_row",  # ~1.2 s
    "tests/checks/test_cases.py::test_masked_rows_torch_gives_zero",  # ~0.9 s (imports torch)
    "tests/checks/test_verify_jax.py::test_cli_forward_and_backward_pass_in_every_dtype",  # ~5 s
    "tests/checks/test_verify_jax.py::test_arrays_jax_hands_jax_arrays_and_reads_jax_arrays",  # ~3 s
    "tests/cost/test_cost.py::test_derive_is_deterministic",  # ~1.1 s (two fresh interpreters)
    "tests/cost/test_cost.py::test_every_option_changes_the_output_or_is_refused",  # ~1.2 s
    "tests/cost/test_cost.py::test_every_pair_of_options_changes_the_output_or_is_refused",  # 8.7 s
    "tests/package/test_proofs.py::test_broken_variant_fails[expected_spread-0]",  # ~1.2 s
    "tests/package/test_proofs.py::test_plain_sympy_reference_passes[divisor_to_zero]",  # ~1.1 s
    "tests/package/test_proofs.py::test_plain_sympy_reference_passes[projection_biases]",  # ~1.9 s
    "tests/package/test_proofs.py::test_proof_holds_and_matches_golden[divisor_to_zero]",  # ~1.3 s
    "tests/package/test_proofs.py::test_proof_holds_and_matches_golden[expected_spread]",  # ~1.8 s
    "tests/package/test_proofs.py::test_proof_holds_and_matches_golden[projection_biases]",  # 1.7 s
    "tests/checks/test_properties.py::test_wrong_attention_fails_and_shrinks_to_a_tiny_input",  # 1.6 s
    "tests/present/test_svg.py::test_a_200_token_score_square_stays_a_few_megabytes",  # ~1.0 s
    "tests/present/test_svg.py::test_a_200_token_square_stays_a_few_megabytes",  # ~1.7 s each
    "tests/present/test_svg.py::test_tooltips_keep_short_closed_forms_and_else_the_certified_decimal",
    # remeasured 2026-12-04 (-n 2, quick layer): 1.5-12 s each
    "tests/checks/test_verify.py::test_search_finds_and_shrinks_a_hard_failure",  # ~12 s
    "tests/checks/test_verify.py::test_search_largest_ulps_reproduces",
    "tests/checks/test_verify.py::test_an_impl_that_raises_is_a_hard_failure",
    "tests/checks/test_verify.py::test_every_option_changes_the_report_or_is_refused",
    "tests/checks/test_verify.py::test_cli_search_prints_a_spec",
    "tests/checks/test_search_shapes.py::test_a_search_whose_worst_input_passes_says_so",
    "tests/checks/test_search_shapes.py::test_cli_batch_mask_reproducer_keeps_the_mask_shape",
    "tests/checks/test_search_shapes.py::test_cli_fixed_heads_find_the_tiling_bug_without_probes",
    "tests/checks/test_search_shapes.py::test_a_batch_mask_bug_is_found_with_two_batches_and_a_padding_mask",
    "tests/checks/test_search_shapes.py::test_heads_and_kv_heads_fix_the_heads_and_find_the_tiling_bug",
    "tests/checks/test_verify_probes.py::test_a_float32_running_sum_and_numpy_pass_every_probe",
    "tests/checks/test_verify_probes.py::test_a_float16_running_sum_fails_on_its_outputs_and_on_the_probes",
    "tests/checks/test_proved_tolerance.py::test_faults_the_old_rule_let_by_fail",
    "tests/checks/test_oracle.py::test_every_path_agrees_with_the_oracle",
    "tests/numbers/test_extreme_logits.py::test_saturated_shares_compare_exactly",
    "tests/numbers/test_extreme_logits.py::test_saturated_output_on_a_rounding_boundary",
    "tests/package/test_layout.py::test_no_private_names_imported_across_modules",
]

#: test files whose every test needs a heavy resource: marked with it and ``slow``, so
#: ``-m jax`` (or dask, models, browser, subprocess) runs one resource's tests
RESOURCE_FILES = {
    "tests/checks/test_verify_jax.py": "jax",
    "tests/checks/test_blocks_dask.py": "dask",
    "tests/audit/test_model_run.py": "models",
    "tests/audit/test_llama.py": "models",
    "tests/present/test_browser.py": "browser",
    "tests/package/test_docs_examples.py": "subprocess",
}


#: the package's doctests (module.object) that run an optional extra's kernel, and the
#: package each needs: without it (``pip install -e '.[test]'`` alone) they skip, naming it
DOCTESTS_NEED = {
    "exactattn.verify.impls.FlexImpl": "torch",
    "exactattn.verify.impls.torch_device": "torch",
}


@pytest.hookimpl(tryfirst=True)  # before -m/-k deselect, so that -m "not slow" sees the marks
def pytest_collection_modifyitems(config, items):
    """Mark the tests named in :data:`SLOW_TESTS` ``slow``; skip the doctests of
    :data:`DOCTESTS_NEED` whose package is not installed."""
    import importlib.util
    for item in items:
        need = DOCTESTS_NEED.get(item.name)
        if need and importlib.util.find_spec(need) is None:
            item.add_marker(pytest.mark.skip(reason=f"needs {need}: pip install -e '.[{need}]'"))
    slow = set(SLOW_TESTS)
    matched = set()
    for item in items:
        resource = RESOURCE_FILES.get(item.nodeid.split("::", 1)[0])
        if resource:
            item.add_marker(getattr(pytest.mark, resource))
            item.add_marker(pytest.mark.slow)
        base = item.nodeid.split("[", 1)[0]
        for key in (item.nodeid, base):
            if key in slow:
                item.add_marker(pytest.mark.slow)
                matched.add(key)
    if any("::" in str(arg) for arg in config.args):
        return  # only some tests of a file were asked for: no staleness check
    collected_files = {item.nodeid.split("::", 1)[0] for item in items}
    stale = sorted(e for e in slow - matched if e.split("::", 1)[0] in collected_files)
    if stale:
        warnings.warn(pytest.PytestWarning(
            "tests/conftest.py SLOW_TESTS names tests that were not collected "
            f"(renamed or removed?): {', '.join(stale)}"), stacklevel=1)


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process: ``cli("scores", "--digits", "6") -> (status, stdout, stderr)``.

    argparse's own errors leave through ``SystemExit(2)``; that code is returned too.
    """
    from exactattn.cli import main

    def run(*argv):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = e.code
        out, err = capsys.readouterr()
        return rc, out, err
    return run
