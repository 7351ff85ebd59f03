"""Small random-init configs of transformers' six Mamba-2 families (transformers 5.x names), shared by
test_integrations_mamba2.py and _hf_kernel_worker.py (which imports no pytest): {family: (config class
name, model class name, config keywords)}, plus COMMON for all."""

COMMON = dict(vocab_size=128)
# tiny configs (transformers 5.x names); a hybrid keeps an attention layer (its cache needs one)
FAMILIES = {
    "Mamba2": ("Mamba2Config", "Mamba2ForCausalLM",
               dict(hidden_size=64, num_hidden_layers=2, num_heads=8, head_dim=16, expand=2, state_size=16,
                    n_groups=2, chunk_size=8, conv_kernel=4)),
    "Bamba": ("BambaConfig", "BambaForCausalLM",
              dict(hidden_size=64, num_hidden_layers=2, attn_layer_indices=[1], num_attention_heads=4,
                   num_key_value_heads=2, intermediate_size=128, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2,
                   mamba_d_state=16, mamba_chunk_size=8, mamba_expand=2)),
    "FalconH1": ("FalconH1Config", "FalconH1ForCausalLM",
                 dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=128, mamba_d_ssm=128, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2,
                      mamba_d_state=16, mamba_chunk_size=8, mamba_expand=2, mamba_rms_norm=True)),
    "GraniteMoeHybrid": ("GraniteMoeHybridConfig", "GraniteMoeHybridForCausalLM",
                         dict(hidden_size=64, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                              num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                              shared_intermediate_size=64, num_local_experts=4, num_experts_per_tok=2,
                              mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16,
                              mamba_chunk_size=8, mamba_expand=2)),
    "NemotronH": ("NemotronHConfig", "NemotronHForCausalLM",
                  dict(hidden_size=64, layers_block_type=["linear_attention", "full_attention", "linear_attention",
                                                          "moe"],
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=128,
                       mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, n_groups=2, chunk_size=8,
                       n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=64,
                       moe_shared_expert_intermediate_size=64)),
    "Zamba2": ("Zamba2Config", "Zamba2ForCausalLM",
               dict(hidden_size=64, num_hidden_layers=2, layers_block_type=["linear_attention", "hybrid"],
                    n_mamba_heads=8, mamba_d_state=16, mamba_ngroups=2, mamba_expand=2, chunk_size=8,
                    num_attention_heads=4, num_key_value_heads=4, intermediate_size=128, num_mem_blocks=1)),
}
