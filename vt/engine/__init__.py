"""The engine, in rooms as vLLM v1 has them:

    config.py      EngineConfig, validated at construction
    core/          the scheduler, the KV cache manager, requests, SchedulerOutput / RunnerOutput
    worker/        the model runner, input batch, graph driver, piecewise buckets, read-back, TP workers
    sample/        SamplingParams, the device sampler, rejection
    spec_decode/   proposers (draft model, n-gram)
    front/         LLMEngine (the loop), LLM (offline API), detokenizer, chat templates, the ladder
"""
